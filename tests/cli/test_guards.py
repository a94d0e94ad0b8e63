"""One line, never a traceback, never a wrong answer: the command-line cases of issue 9 (groups 2, 6, 7)."""
import json
import re

import paddle
import pytest
from conftest import DEMO, export_tiny_model, overrides, write_tsv

from paddle_ft.artifacts.run import RunFiles
from paddle_ft.cli import main
from paddle_ft.engine.events import EventLog
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor


def one_line_error(capsys, *fragments):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(best/, export/) of a tiny model, and a labelled file it can be scored on."""
    folder = tmp_path_factory.mktemp("model")
    export = export_tiny_model(folder)
    write_tsv(folder / "test.tsv", [("好棒赞", "正面"), ("差坏烂", "负面")])
    return folder / "best", export, folder / "test.tsv"


@pytest.mark.parametrize("argv, fragment", [
    (["eval", "--model", "M", "--data", "D", "--batch-size", "-1"],
     "paddle_ft eval: argument --batch-size: expected a positive integer, got '-1'"),
    (["eval", "--model", "M", "--data", "D", "--batch-size", "0"], "expected a positive integer, got '0'"),
    (["predict", "--export", "E", "--text", "好", "--batch-size", "-1"], "expected a positive integer"),
    (["predict", "--export", "E", "--text", "好", "--threads", "-1"], "argument --threads: expected a positive"),
    (["predict", "--export", "E", "--text", "好", "--batch-size", "9" * 5000], "expected a positive integer"),
    (["serve", "--export", "E", "--port", "70000"], "argument --port: expected a port from 0 to 65535"),
    (["serve", "--export", "E", "--max-wait-ms", "nan"], "expected a finite number >= 0, got 'nan'"),
    (["serve", "--export", "E", "--read-timeout", "-3"], "expected a finite number >= 0"),
    # issue 63: --budget is minutes, and no budget is zero
    (["init", "--train", "T", "--budget", "0", "--output-file", "x.yaml"],
     "argument --budget: expected a finite number > 0, got '0'"),
    (["cv", "--config", "C", "--budget", "nan"], "argument --budget: expected a finite number > 0, got 'nan'"),
    (["sweep", "--config", "C", "--space", "S", "--budget", "-5"],
     "argument --budget: expected a finite number > 0, got '-5'"),
    (["select-texts", "--model", "M", "--pool", "P", "--count", "0", "--to", "doccano", "--output-file", "t.jsonl"],
     "argument --count: expected a positive integer, got '0'"),
])
def test_every_numeric_option_is_range_checked_in_one_line(argv, fragment, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    one_line_error(capsys, fragment)


def test_eval_scores_exactly_whatever_the_batch_size(model, capsys):
    best, _, data = model
    reports = []
    for batch_size in ("1", "64"):
        assert main(["eval", "--model", str(best), "--data", str(data), "--batch-size", batch_size,
                     "--errors", str(best.parent / "wrong.tsv"), "--overwrite"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0]["accuracy"] == reports[1]["accuracy"]


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_predict_refuses_a_blank_text_like_the_server(model, text, capsys):
    _, export, _ = model
    assert main(["predict", "--export", str(export), "--text", "好", "--text", text]) == 2
    one_line_error(capsys, "--text #2 holds no character the model reads")  # the second --text, counted from 1


def test_a_model_with_nan_weights_is_never_scored(model, tmp_path, capsys):
    import shutil

    from paddle_ft.artifacts.bundle import MODEL_STATE

    best, _, data = model
    broken = tmp_path / "best"
    shutil.copytree(best, broken)
    state = paddle.load(str(broken / MODEL_STATE))
    state["classifier.weight"] = paddle.full_like(state["classifier.weight"], float("nan"))
    paddle.save(state, str(broken / MODEL_STATE))
    assert main(["eval", "--model", str(broken), "--data", str(data)]) == 2
    one_line_error(capsys, "the model's scores are NaN/inf")
    assert main(["export", "--model", str(broken), "--output", str(tmp_path / "export")]) == 2
    one_line_error(capsys, "exported model differs from dygraph by nan")
    assert not (tmp_path / "export").exists()


def test_metrics_never_hold_non_json_numbers(tmp_path):
    events = EventLog(RunFiles(tmp_path))
    events.write("train", 1, loss=float("inf"), grad_norm=float("nan"), dev={"accuracy": 0.5})
    events.close()
    record = json.loads((tmp_path / "metrics.jsonl").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert record == {"event": "train", "step": 1, "loss": None, "grad_norm": None, "dev": {"accuracy": 0.5}}


@pytest.mark.parametrize("where, fragment", [
    ("missing/wrong.tsv", "--errors {p}: its folder {d} does not exist"),
    ("", "--errors {p} is a folder"),
])
def test_eval_errors_path_is_checked_before_scoring(model, tmp_path, where, fragment, capsys):
    best, _, data = model
    path = tmp_path / where
    assert main(["eval", "--model", str(best), "--data", str(data), "--errors", str(path)]) == 2
    one_line_error(capsys, fragment.format(p=path, d=path.parent))


def test_predict_output_path_is_checked(model, tmp_path, capsys):
    _, export, _ = model
    assert main(["predict", "--export", str(export), "--text", "好", "--output-file", str(tmp_path)]) == 2
    one_line_error(capsys, "is a folder; give a file path")
    assert main(["predict", "--export", str(export), "--text", "好", "--output-file", str(tmp_path / "x" / "p.jsonl")]) == 2
    one_line_error(capsys, "does not exist")


@pytest.mark.parametrize("damage, fragment", [
    (lambda d: (d / "export.json").write_text("{broken"), "export.json is damaged (not JSON)"),
    (lambda d: (d / "export.json").unlink(), "export.json is missing"),
    (lambda d: (d / "export.json").write_text('{"format_version": 2, "model": {"labels": ["a"], "max_length": 64}}'),
     "export.json is damaged or from a newer paddle_ft (labels)"),
    (lambda d: (d / "export.json").write_text('{"format_version": 2, "model": {"labels": ["a", "b"]}}'),
     "export.json is damaged (its fields are not a paddle_ft model's)"),
    (lambda d: (d / "model.pdiparams").write_bytes((d / "model.pdiparams").read_bytes()[:1000]),
     "model.pdiparams cannot be loaded"),
    (lambda d: (d / "model.pdiparams").write_bytes(b""), "model.pdiparams cannot be loaded"),
    (lambda d: (d / "model.onnx").write_bytes((d / "model.onnx").read_bytes()[:1000]), "model.onnx cannot be loaded"),
    (lambda d: (d / "model.onnx").unlink(), "has no model.onnx"),
])
def test_a_damaged_export_is_one_line(model, tmp_path, damage, fragment):
    import shutil

    _, export, _ = model
    copy = tmp_path / "export"
    shutil.copytree(export, copy)
    damage(copy)
    backend = "onnxruntime" if "onnx" in fragment else "paddle"  # each engine reads its own graph and weights
    with pytest.raises(UserError, match=re.escape(fragment)) as info:
        Predictor(copy, PredictOptions(cpu_threads=1, backend=backend))
    assert "\n" not in str(info.value)


def write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("content, fragment", [
    (b"seed: 1\n\xff\xfe\n", "not UTF-8 (byte"),
    (b"a: " + b"[" * 5000 + b"\n", "nested too deeply"),
    (b"train:\n  epochs: 1\n  epochs: 2\n", ":3: not valid YAML (the key 'epochs' appears twice in one section)"),
])
def test_unreadable_configs_are_one_line(tmp_path, content, fragment, capsys):
    config = write(tmp_path / "c.yaml", content)
    assert main(["train", "--config", str(config)]) == 2
    one_line_error(capsys, fragment)


@pytest.mark.parametrize("labels, fragment", [
    (b"\xff\xfe\n", "config key 'data.labels': {p}:1: bytes that are not UTF-8 at byte 0; re-save the file as UTF-8"),
    ("正面\n正面\n".encode(), "config key 'data.labels': the label file {p}: duplicate label names"),
    ("正面\n".encode(), "config key 'data.labels': the label file {p}: a classifier needs at least 2 labels"),
])
def test_label_file_problems_name_the_key_and_file(tiny_config_args, tmp_path, labels, fragment, capsys):
    path = write(tmp_path / "labels.txt", labels)
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + [f"data.labels={path}"])]) == 2
    one_line_error(capsys, fragment.format(p=path))


def test_a_byte_order_mark_is_not_part_of_the_first_label(tiny_config_args, tmp_path):
    from paddle_ft.data.labels import resolve_labels

    path = write(tmp_path / "labels.txt", "\ufeff负面\n正面\n".encode())
    assert resolve_labels(str(path), None).names == ("负面", "正面")


def test_one_label_in_train_names_data_labels(tiny_config_args, tmp_path, capsys):
    train = write_tsv(tmp_path / "one.tsv", [("好", "正面")] * 3)
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + [f"data.train={train}", "data.labels=null"])]) == 2
    one_line_error(capsys, "config key 'data.labels': the training file (data.train): a classifier needs at least 2")


@pytest.mark.parametrize("vocab, fragment", [(b"", "lacks [PAD], [UNK], [CLS], [SEP]"),
                                              (bytes(range(256)), "is not a UTF-8 text file")])
def test_an_empty_or_binary_vocab_is_one_line(tiny_config_args, tmp_path, vocab, fragment, capsys):
    path = write(tmp_path / "vocab.txt", vocab)
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + [f"model.scratch.vocab_file={path}"])]) == 2
    one_line_error(capsys, "config key 'model.scratch.vocab_file'", fragment)


def test_a_full_disk_while_training_is_one_line_naming_the_resume(tiny_config_args, tmp_path, monkeypatch, capsys):
    import errno

    import paddle_ft.engine.checkpoint as checkpoint

    real_save, calls = checkpoint.save_state, []

    def save_until_full(obj, path):
        calls.append(path)
        if len(calls) > 3:  # the first checkpoint's model, optimizer and scheduler fit; then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_save(obj, path)

    monkeypatch.setattr(checkpoint, "save_state", save_until_full)
    out = tmp_path / "out"
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + ["train.checkpoints.every=5"])]) == 2
    one_line_error(capsys, "the disk is full writing", "the last complete checkpoint is intact",
                   f"resume with: python -m paddle_ft train --config {out / 'config.yaml'} -o train.resume=auto")
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-5"]  # no half-written step-10


@pytest.mark.parametrize("setting", ["train.evaluation.every=5", "train.evaluation.early_stopping_patience=2"])
def test_evaluation_settings_without_a_dev_file_are_refused(setting, tiny_config_args, capsys):
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + ["data.dev=null", setting])]) == 2
    key, value = setting.split("=")
    one_line_error(capsys, f"config key '{key}' (from -o): is {value} but data.dev is not set")


@pytest.mark.parametrize("content", ["{broken", '["负面", "正面"]', '{"负面": 0, "正面": 5}',
                                     '{"负面": 0, "正面": "1"}'])
def test_a_damaged_label_map_is_one_line(content, tmp_path):
    from paddle_ft.data.labels import LabelMap

    (tmp_path / "label_map.json").write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=r"label_map.json is damaged .*; re-run training or export$"):
        LabelMap.load(tmp_path)
