"""Issue 44: the prototype head (a class = a vector in the encoder's space, cosine x a learned scale): zero-shot from
label descriptions, the few-shot recipe, and the head's round trip through best/ and the export."""
import json
import random
import re
import shutil

import numpy as np
import paddle
import pytest
from conftest import (DEMO, LABELS, NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS, overrides, tiny_run_args,
                      write_tsv, write_vocab)

from paddle_ft.cli import main
from paddle_ft.errors import UserError

PROTOTYPE = ["model.head=prototype", "model.pooling=mean", "train.runtime.write_report=false"]


def keyword_rows(n: int, seed: int) -> list[tuple[str, str]]:
    """Texts of 8-30 characters, half of them their class's keywords (the mood characters), the rest neutral."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = LABELS[i % 2]
        mood = POSITIVE_CHARS if label == "正面" else NEGATIVE_CHARS
        text = "".join(rng.choice(mood if rng.random() < 0.5 else NEUTRAL_CHARS) for _ in range(rng.randint(8, 30)))
        rows.append((text, label))
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("keywords")
    for split, n, seed in (("train", 8, 1), ("dev", 60, 2), ("test", 200, 3)):  # train: 4 rows per class
        write_tsv(root / f"{split}.tsv", keyword_rows(n, seed))
    (root / "labels.tsv").write_text(f"负面\t{NEGATIVE_CHARS}\n正面\t{POSITIVE_CHARS}\n", encoding="utf-8")
    write_vocab(root / "vocab.txt")
    return root


def run_args(corpus, out, *extra) -> list[str]:
    return overrides([*tiny_run_args(corpus, corpus / "vocab.txt", out), *extra])


def test_zero_shot_from_descriptions_alone_scores_090_and_exports_the_same_answers(corpus, tmp_path):
    out = tmp_path / "zero"
    assert main(["train", "-c", DEMO, *run_args(corpus, out, "data.train=null", *PROTOTYPE,
                                                 f"data.label_descriptions={corpus / 'labels.tsv'}")]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["best_step"] == 0 and results["test"]["accuracy"] >= 0.9
    meta = json.loads((out / "best" / "paddle_ft.json").read_text(encoding="utf-8"))
    assert meta["head"] == "prototype" and meta["labels"] == list(LABELS)
    # issue 63: its report drew three empty charts; it says there is no training curve
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "No training curve: this model took no training step" in page and not (out / "report" / "curves.png").exists()
    assert main(["export", "--model", str(out / "best"), "--output", str(out / "export")]) == 0
    from paddle_ft.artifacts.bundle import load_bundle
    from paddle_ft.data.features import pad_batch
    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.inference.predictor import Predictor
    from conftest import features_of

    bundle = load_bundle(out / "best")
    batch = pad_batch(features_of(keyword_rows(40, 9), bundle.tokenizer), list(range(40)), bundle.tokenizer.pad_token_id)
    dygraph = bundle.model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"])).numpy()
    for backend in ("paddle", "onnxruntime"):
        static = Predictor(out / "export", PredictOptions(backend=backend)).run(batch["input_ids"],
                                                                                 batch["token_type_ids"])
        assert np.abs(static - dygraph).max() <= 1e-5, backend


def test_the_few_shot_recipe_beats_plain_fine_tuning_at_four_rows_per_class(corpus, tmp_path):
    scores = {}
    for name, extra in (("plain", ["train.epochs=10"]),
                        ("few_shot", [*PROTOTYPE, "train.recipe=few_shot", "train.epochs=1", "train.batch_size=8",
                                      "train.optimizer.learning_rate=1e-3"])):
        assert main(["train", "-c", DEMO, *run_args(corpus, tmp_path / name, "train.runtime.write_report=false",
                                                     *extra)]) == 0
        scores[name] = json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))["test"]["accuracy"]
    assert scores["few_shot"] >= scores["plain"] + 0.1, scores


def test_a_few_shot_run_resumed_midway_ends_with_the_same_weights(corpus, tmp_path):
    common = [*PROTOTYPE, "train.recipe=few_shot", "train.epochs=2", "train.batch_size=8", "train.few_shot.iterations=4",
              "model.dropout=0.1", "train.checkpoints.every=3", "train.checkpoints.keep=10"]
    assert main(["train", "-c", DEMO, *run_args(corpus, tmp_path / "whole", *common)]) == 0
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    for later in ("step-4", "step-6", "step-8"):  # as if it had stopped after step 3
        shutil.rmtree(tmp_path / "cut" / "checkpoints" / later)
    assert main(["train", "-c", DEMO, *run_args(corpus, tmp_path / "cut", *common, "train.resume=auto")]) == 0
    whole, resumed = (paddle.load(str(tmp_path / run / "checkpoints" / "step-8" / "model_state.pdparams"))
                      for run in ("whole", "cut"))
    assert whole.keys() == resumed.keys() and "classifier.log_scale" in whole
    assert all(np.array_equal(whole[k].numpy(), resumed[k].numpy()) for k in whole)


def test_the_head_learns_its_scale_and_is_not_decayed():
    from paddle_ft.engine.optim import uses_weight_decay

    assert not uses_weight_decay("classifier.log_scale") and uses_weight_decay("classifier.weight")


@pytest.mark.parametrize("line, message", [
    ("负面\n正面\t好\n", "labels.tsv:1: expected a label name, a tab and a short description"),
    ("负面\t差\n负面\t坏\n", "labels.tsv:2: label '负面' is described twice"),
    ("负面\t差\n", "describes 1 label(s); a classifier needs two or more"),
])
def test_a_bad_description_file_is_one_line_naming_the_line(tmp_path, line, message):
    from paddle_ft.data.labels import read_label_descriptions

    (tmp_path / "labels.tsv").write_text(line, encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(message)):
        read_label_descriptions(tmp_path / "labels.tsv")


@pytest.mark.parametrize("setting, message", [
    (["model.head=prototype", "model.pooling=pooler"], "'model.pooling' (from -o): is pooler, whose output was trained to tell"),
    (["train.recipe=few_shot"], "'train.recipe' (from -o): is few_shot, which builds class prototypes: set model.head: prototype"),
    (["model.head=prototype", "model.pooling=mean", "task=multi_label", "train.evaluation.metric=micro_f1"],
     "'model.head' (from -o): is prototype, which gives one label per text"),
])
def test_settings_a_prototype_head_cannot_use_are_refused_by_key(corpus, tmp_path, capsys, setting, message):
    assert main(["train", "-c", DEMO, *run_args(corpus, tmp_path / "out", *setting)]) == 2
    assert message in capsys.readouterr().err


def test_a_description_the_model_reads_as_no_text_is_refused(corpus, tmp_path, capsys):
    (tmp_path / "labels.tsv").write_text("负面\t差\n正面\t\u200b\u200b\n", encoding="utf-8")
    assert main(["train", "-c", DEMO, *run_args(corpus, tmp_path / "out", "data.train=null", *PROTOTYPE,
                                                 f"data.label_descriptions={tmp_path / 'labels.tsv'}")]) != 0
    err = capsys.readouterr().err
    assert "labels.tsv" in err and "holds no character the model reads" in err
