import runpy
from pathlib import Path

import pytest

from paddle_ft.config import load_config, save_config
from paddle_ft.errors import ConfigError, UserError

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo-scratch.yaml"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_demo_config_loads_with_its_values():
    config = load_config(DEMO)
    assert config.data.labels == ("负面", "正面")
    assert config.model.scratch.hidden_size == 128
    assert config.train.optimizer.learning_rate == 5e-4
    assert config.train.amp.enabled == "auto"


def test_the_demo_fine_tunes_what_the_demo_pretraining_writes_and_scratch_is_the_same_model():
    """The three small-encoder rows compare like with like: one encoder shape, one data split, one fine-tuning recipe.
    make demo-tiny fine-tunes the shipped encoder, which tools/demo_encoder.py ships from the pretraining run's best/."""
    pretrain, demo = load_config(ROOT / "configs" / "pretrain-demo.yaml"), load_config(ROOT / "configs" / "demo-tiny.yaml")
    shipping = runpy.run_path(str(ROOT / "tools" / "demo_encoder.py"))
    assert shipping["RUN"] == ROOT / pretrain.output_dir and shipping["SHIPPED"] == ROOT / demo.model.backbone
    assert demo.model.scratch is None
    assert pretrain.model.scratch == load_config(DEMO).model.scratch
    assert demo.data == load_config(DEMO).data and demo.train == load_config(DEMO).train
    # pretrained without dropout; fine-tuned with the scratch recipe's
    assert pretrain.model.dropout == 0 and demo.model.encoder_dropout == load_config(DEMO).model.dropout


def test_overrides_are_read_as_yaml():
    config = load_config(DEMO, ["train.optimizer.learning_rate=3e-5", "data.test=null", "train.amp.enabled=true",
                                "data.labels=[a, b, c]", "train.max_steps=7"])
    assert config.train.optimizer.learning_rate == 3e-5
    assert config.data.test is None
    assert config.train.amp.enabled is True
    assert config.data.labels == ("a", "b", "c")
    assert config.train.max_steps == 7


def test_unknown_key_names_key_and_line(tmp_path):
    path = write(tmp_path, "model:\n  scratch:\n    vocab_file: v.txt\ntrain:\n  epochs: 2\n  learning_rat: 1e-3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"config key 'train.learning_rat' ({path}:6): unknown key (did you mean "
                                      "train.optimizer.learning_rate?)")


def test_every_problem_of_a_config_is_reported_at_once(tmp_path, capsys):
    from paddle_ft.cli import main
    from paddle_ft.errors import ConfigErrors

    path = write(tmp_path, "model:\n  scratch:\n    vocab_file: v.txt\n    num_layers: 0\n"
                           "train:\n  epochs: many\n  learning_rate: 1e-3\n  runtime:\n    log_evry: 5\n")
    with pytest.raises(ConfigErrors) as info:
        load_config(path, ["data.max_length=4"])
    assert [str(e).split(": ", 1)[0] for e in info.value.errors] == [  # in file order, then the overrides
        f"config key 'model.scratch.num_layers' ({path}:4)", f"config key 'train.epochs' ({path}:6)",
        f"config key 'train.learning_rate' ({path}:7)", f"config key 'train.runtime.log_evry' ({path}:9)",
        "config key 'data.max_length' (from -o)"]
    assert main(["train", "--config", str(path), "-o", "data.max_length=4"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(line.startswith("error: config key '") for line in lines)


def test_contradicting_settings_are_reported_together():
    from paddle_ft.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as info:
        load_config(DEMO, ["data.dev=null", "train.evaluation.every=5", "model.scratch.num_heads=3"])
    assert sorted(e.key for e in info.value.errors) == ["model.scratch.num_heads", "train.evaluation.every"]


def test_unknown_override_key_says_it_came_from_o():
    with pytest.raises(ConfigError, match=r"config key 'train.lr' \(from -o\): unknown key"):
        load_config(DEMO, ["train.lr=1"])


@pytest.mark.parametrize("override, message", [
    ("train.batch_size=-3", "config key 'train.batch_size' (from -o): expected a positive int, got -3"),
    ("train.batch_size=abc", "config key 'train.batch_size' (from -o): expected an integer, got 'abc'"),
    ("train.amp.enabled=maybe", "config key 'train.amp.enabled' (from -o): expected true, false or auto, got 'maybe'"),
    ("train.amp.dtype=int8", "config key 'train.amp.dtype' (from -o): expected one of float16, bfloat16, got 'int8'"),
    ("model.dropout=1.5", "config key 'model.dropout' (from -o): expected a number in [0, 1), got 1.5"),
    ("data.format=xlsx", "config key 'data.format' (from -o): expected one of tsv, csv, jsonl, got 'xlsx'"),
    ("train=3", "config key 'train' (from -o): expected a mapping, got 3"),
    ("model.scratch.num_heads=3", "config key 'model.scratch.num_heads' (from -o): must divide hidden_size (128)"),
    ("train.optimizer.learning_rate=.inf",
     "config key 'train.optimizer.learning_rate' (from -o): expected a finite number, got inf"),
    ("train.optimizer.learning_rate=1e999",
     "config key 'train.optimizer.learning_rate' (from -o): expected a finite number, got '1e999'"),
    ("train.optimizer.warmup=.nan", "config key 'train.optimizer.warmup' (from -o): expected a finite number, got nan"),
    ("seed=-1", "config key 'seed' (from -o): expected an integer from 0 to 2**32 - 1, got -1"),
    ("seed=99999999999", "config key 'seed' (from -o): expected an integer from 0 to 2**32 - 1, got 99999999999"),
    ("train.epochs=" + "9" * 30, "config key 'train.epochs' (from -o): expected an integer below 2**63, got 99999"),
    ("output_dir=''", "config key 'output_dir' (from -o): expected a folder path, got ''"),
])
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(DEMO, [override])
    assert str(info.value).startswith(message)


def test_wrong_type_in_file_names_the_line(tmp_path):
    path = write(tmp_path, "model:\n  scratch: {vocab_file: v.txt}\ntrain:\n  epochs: three\n")
    with pytest.raises(ConfigError, match=rf"'train.epochs' \({path}:4\): expected an integer, got 'three'"):
        load_config(path)


def test_missing_backbone_and_scratch_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="'model.backbone'.*model.scratch.vocab_file"):
        load_config(write(tmp_path, "seed: 1\n"))


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "train:\n  epochs: [1\n  batch_size: 2\n")
    with pytest.raises(UserError, match=rf"^{path}:\d+: not valid YAML"):
        load_config(path)


def test_bad_override_syntax():
    with pytest.raises(UserError, match="is not KEY=VALUE"):
        load_config(DEMO, ["train.epochs"])


def test_missing_config_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_resolved_config_round_trips(tmp_path):
    config = load_config(DEMO, ["train.epochs=5", "data.labels=[x, y]"])
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_every_config_field_has_a_docstring():
    """The README promises a one-line docstring per key: the string literal right after each field."""
    import ast
    import inspect

    import paddle_ft.config as module

    missing = []
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
            for field, after in zip(node.body, node.body[1:] + [None]):
                documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                    and isinstance(after.value.value, str)
                if isinstance(field, ast.AnnAssign) and not documented:
                    missing.append(f"{node.name}.{field.target.id}")
    assert missing == []


def test_a_backbone_and_a_scratch_encoder_together_are_refused():
    with pytest.raises(ConfigError, match=r"config key 'model.scratch' \(.+demo-scratch.yaml:\d+\): model.backbone "
                                          r"\(bert-base-chinese\) is set too"):
        load_config(DEMO, ["model.backbone=bert-base-chinese"])
    assert load_config(DEMO, ["model.backbone=bert-base-chinese", "model.scratch=null"]).model.scratch is None


@pytest.mark.parametrize("recipe", sorted((ROOT / "configs").glob("finetune-*.yaml")), ids=lambda p: p.stem)
def test_each_fine_tuning_recipe_loads_with_the_usual_settings(recipe):
    config = load_config(recipe)
    assert config.model.backbone and config.model.scratch is None
    assert 2e-5 <= config.train.optimizer.learning_rate <= 5e-5 and config.train.optimizer.warmup == 0.1
    assert (config.train.epochs, config.train.batch_size, config.data.max_length) == (3, 32, 128)
    text = recipe.read_text(encoding="utf-8")
    assert "Published for this checkpoint" in text and "github.com/" in text  # what to expect, and its source


def test_five_recipes_cover_the_families():
    names = {p.stem for p in (ROOT / "configs").glob("finetune-*.yaml")}
    assert names == {"finetune-bert-base-chinese", "finetune-roberta-wwm-ext", "finetune-rbt3",
                     "finetune-ernie-3.0-medium-zh", "finetune-ernie-3.0-mini-zh"}


def test_the_config_reference_in_docs_is_generated_from_the_config():
    generated = runpy.run_path(str(ROOT / "tools" / "config_reference.py"))["markdown"]()
    assert (ROOT / "docs" / "config.md").read_text(encoding="utf-8") == generated, \
        "docs/config.md is stale: python tools/config_reference.py > docs/config.md"
