"""Thousands of labels: a 20,000-label model trains, evaluates with a readable report, exports, predicts and serves
on a tiny encoder, every answer of a bounded size. `tools/many_labels_bench.py` measures time and memory."""
import json

import numpy as np
import pytest
from conftest import DEMO, overrides
from many_labels import write_corpus

from paddle_ft.cli import main
from paddle_ft.engine.metrics import SHOWN_CLASSES
from paddle_ft.inference.predictor import TOP_PROBABILITIES, Prediction

LABELS = 20_000


def test_an_answer_of_many_labels_lists_the_most_probable_and_top_is_exact_on_ties():
    names = tuple(f"L{i}" for i in range(150))
    vector = np.full(150, 0.001)
    vector[[7, 3, 120]] = [0.2, 0.2, 0.5]
    prediction = Prediction(names, vector, False)
    assert prediction.top(3) == [("L120", 0.5), ("L3", 0.2), ("L7", 0.2)]  # a tie keeps class-id order
    assert prediction.top(4)[-1] == ("L0", 0.001)
    shown = prediction.as_dict()["probabilities"]
    assert len(shown) == TOP_PROBABILITIES and list(shown)[:3] == ["L120", "L3", "L7"]
    small = Prediction(names[:5], vector[:5] / vector[:5].sum(), False)
    assert list(small.as_dict()["probabilities"]) == list(names[:5])  # a small model lists every label


@pytest.mark.slow
def test_a_20000_label_model_trains_evaluates_exports_predicts_and_serves(tmp_path, capsys):
    import httpx

    from bench.server_process import ServerProcess

    data = write_corpus(tmp_path / "data", LABELS, {"train": 1, "dev": 1})
    lines = (data / "dev.tsv").read_text(encoding="utf-8").splitlines()
    (data / "dev-part.tsv").write_text("\n".join(lines[:1001]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    settings = [f"output_dir={out}", f"data.train={data / 'train.tsv'}", f"data.dev={data / 'dev-part.tsv'}",
                "data.test=null", "data.labels=null", "data.max_length=16",
                f"model.scratch.vocab_file={data / 'vocab.txt'}", "model.pooling=mean", "model.scratch.hidden_size=32",
                "model.scratch.num_layers=1", "model.scratch.num_heads=2", "model.scratch.intermediate_size=64",
                "model.scratch.max_position_embeddings=16", "train.epochs=1", "train.batch_size=64",
                "train.optimizer.learning_rate=2e-3", "train.runtime.write_report=true"]
    assert main(["train", "--config", DEMO, *overrides(settings)]) == 0
    said = "".join(capsys.readouterr())
    assert "L19999" not in said  # the training log never lists every class
    page = (out / "report.html").read_text(encoding="utf-8")
    assert len(page) < 500_000 and "the pairs mistaken most often" in page and "worst of 20000" in page

    assert main(["eval", "--model", str(out / "best"), "--data", str(data / "dev-part.tsv")]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert "per_class" not in evaluated and len(evaluated["per_class_best"]) == SHOWN_CLASSES
    per_class = open(evaluated["per_class_file"], encoding="utf-8").read().splitlines()
    assert len(per_class) == LABELS + 1  # a header and every class

    export = tmp_path / "export"
    assert main(["export", "--model", str(out / "best"), "--output", str(export)]) == 0
    texts = [line.split("\t")[0] for line in lines[1:33]]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "texts.txt"), "--output-file",
                 str(tmp_path / "answers.jsonl")]) == 0
    answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(answers) == 32 and all(answer["label"].startswith("L") for answer in answers)

    server = ServerProcess(export, tmp_path / "server.log", "--threads", "1")
    try:
        response = httpx.post(f"{server.url}/v1/classify", json={"texts": texts}, timeout=120)
    finally:
        assert server.stop() == 0
    results = response.json()["results"]
    assert [r["label"] for r in results] == [a["label"] for a in answers]
    assert all(len(r["probabilities"]) == TOP_PROBABILITIES for r in results)
    assert len(response.content) < 32 * 2_000  # bounded per text, not 20,000 numbers


def test_eval_of_many_labels_prints_the_extremes_and_files_every_label_with_its_threshold(tmp_path):
    from paddle_ft.workflows.evaluation import _readable

    names = [f"L{i}" for i in range(40)]
    report = {"micro_f1": 0.5, "per_label": {n: {"precision": 0.5, "recall": 0.5, "f1": i / 40, "support": 1}
                                              for i, n in enumerate(names)},
              "thresholds": {n: 0.25 for n in names}}
    shown = _readable(report, tmp_path / "per_label-test.tsv")
    assert "thresholds" not in shown and "per_label" not in shown and list(shown["per_label_best"])[0] == "L39"
    lines = (tmp_path / "per_label-test.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "label\tprecision\trecall\tf1\tsupport\tthreshold" and lines[1].endswith("\t0.25")
    assert len(lines) == 41
