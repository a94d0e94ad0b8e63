"""paddle_ft.train and paddle_ft.load: the command line's training and a classifier, from Python."""
import gc
import subprocess
import sys

import pytest
import yaml
from conftest import DEMO, ROOT, export_tiny_model

import paddle_ft
import paddle_ft.api
from paddle_ft.errors import UserError


def test_train_returns_the_results_and_load_classifies_with_the_best_model(tiny_config_args, tmp_path):
    overrides = {key: yaml.safe_load(value) for key, value in (arg.split("=", 1) for arg in tiny_config_args)}
    overrides.update({"data.labels": ["负面", "正面"], "train.epochs": 3})  # lists and numbers, as Python gives them
    results = paddle_ft.train(DEMO, overrides)
    assert results.test["examples"] == 60 and results.test["accuracy"] > 0.9 and results.metric == "accuracy"
    best = tmp_path / "out" / "best"
    classify = paddle_ft.load(best)
    answers = classify(["好好棒赞", "差差烂糟"])
    assert [a["label"] for a in answers] == ["正面", "负面"]
    scratch = classify.predictor.export_dir.parent
    assert scratch.is_dir() and scratch.name.startswith("paddle_ft-load-")
    del classify
    gc.collect()
    assert not scratch.exists()  # the temporary export goes with its classifier


def test_load_takes_an_export_and_refuses_anything_else(tmp_path):
    export = export_tiny_model(tmp_path / "model")
    assert paddle_ft.load(export)("好")["label"] in ("负面", "正面")
    with pytest.raises(UserError, match="is neither an export nor a model folder"):
        paddle_ft.load(tmp_path)


def test_train_reports_a_bad_key_as_the_command_line_does(tiny_config_args):
    with pytest.raises(UserError, match="config key 'train.epoch' \\(from -o\\): unknown key"):
        paddle_ft.train(DEMO, tiny_config_args + ["train.epoch=3"])


@pytest.mark.slow
def test_the_classifier_is_as_quiet_as_the_command_line(tmp_path):
    export = export_tiny_model(tmp_path / "model")
    code = f"import paddle_ft; print(paddle_ft.Classifier({str(export)!r})('好')['label'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() in ("负面", "正面")
    assert done.stderr == ""  # no Paddle or PaddleNLP chatter


# issue 43, roots 3 and 11: the public entry points check their arguments' types
@pytest.mark.parametrize("overrides, fragment", [
    ("train.epochs=3", "not one string ('train.epochs=3')"),
    ([("train.epochs", 3)], "not a list holding a tuple"),
    ({3: "x"}, "the keys are dotted config keys"),
])
def test_train_refuses_overrides_it_would_misread(overrides, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", "\\(").replace(")", "\\)")):
        paddle_ft.train(DEMO, overrides)


def test_train_given_a_folder_says_it_wants_the_config_file(tmp_path):
    with pytest.raises(UserError, match="that is a folder; give the YAML config file"):
        paddle_ft.train(tmp_path)


def test_the_classifier_refuses_a_dict_or_a_set_instead_of_reading_their_keys(tmp_path):
    classify = paddle_ft.load(export_tiny_model(tmp_path / "model"))
    for texts in ({"好评": 1, "差评": 2}, {"好", "坏"}):
        with pytest.raises(UserError, match=f"give a list of texts, not a {type(texts).__name__}"):
            classify(texts)


def test_a_failed_load_leaves_no_temporary_folder(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    export_tiny_model(tmp_path / "model")

    def refuse(*args, **options):
        raise UserError("the options do not fit this machine")

    monkeypatch.setattr(paddle_ft.api, "Classifier", refuse)  # a load that fails after the export was written
    with pytest.raises(UserError, match="do not fit"):
        paddle_ft.load(tmp_path / "model" / "best")
    assert list((tmp_path / "tmp").iterdir()) == []


def test_user_error_is_reachable_from_the_package():
    assert paddle_ft.UserError is UserError
