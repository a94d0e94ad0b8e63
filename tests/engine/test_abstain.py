"""Abstain at a chosen coverage: one confidence threshold fitted on dev, saved with the model, applied the same way
by eval, the export (Paddle Inference and ONNX Runtime), Classifier, predict and the server."""
import json

import numpy as np
import pytest
from conftest import DEMO, overrides

from paddle_ft.cli import main
from paddle_ft.config import load_config
from paddle_ft.engine.metrics import abstain_threshold, decision_report
from paddle_ft.errors import ConfigError


def test_the_threshold_answers_the_target_share_and_the_curve_ranks_by_confidence():
    confidence = np.array([0.95, 0.9, 0.8, 0.7, 0.6, 0.55, 0.52, 0.51, 0.5, 0.5])
    assert abstain_threshold(confidence, 0.8) == 0.51 and abstain_threshold(confidence, 1.0) == 0.5
    probabilities = np.stack([confidence, 1 - confidence], axis=1)
    gold = np.array([0, 0, 0, 0, 1, 0, 1, 1, 0, 1])  # the confident ones right, the doubtful ones half wrong
    report = decision_report(probabilities, gold, 0.52, points=5)
    assert report["coverage"] == 0.7 and report["abstained"] == 3
    assert report["answered_accuracy"] == pytest.approx(5 / 7) and report["accuracy_of_all"] == pytest.approx(0.6)
    assert report["risk_coverage"] == [[0.2, 1.0], [0.4, 1.0], [0.6, 5 / 6], [0.8, 5 / 8], [1.0, 0.6]]


@pytest.mark.parametrize("setting, fragment", [
    (["train.decision.target_coverage=0.8", "train.decision.abstain_below=0.7"], "are both set: give one"),
    (["train.decision.target_coverage=0.8", "data.dev=null"], "is fitted on dev: set data.dev"),
    (["train.decision.target_coverage=1.5"], "expected a share in (0, 1]"),
    (["task=multi_label", "train.evaluation.metric=micro_f1", "train.decision.abstain_below=0.7"],
     "a multi_label model learns each label"),
])
def test_decision_settings_that_cannot_work_are_refused(setting, fragment):
    with pytest.raises(ConfigError) as raised:
        load_config(DEMO, setting)
    assert fragment in str(raised.value)


def abstained_by_every_consumer(tmp_path, texts: list[str], out) -> dict:
    """The texts each consumer marks abstained, as sets of indices."""
    import paddle_ft
    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.inference.predictor import Predictor

    export = out / "export"
    assert main(["export", "--model", str(out / "best"), "--output", str(export)]) == 0
    found = {backend: {i for i, p in enumerate(Predictor(export, PredictOptions(backend=backend)).predict(texts))
                       if p.abstained}
             for backend in ("paddle", "onnxruntime")}
    found["classifier"] = {i for i, answer in enumerate(paddle_ft.Classifier(export)(texts))
                           if answer["abstained"]}
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "texts.txt"), "--output-file",
                 str(tmp_path / "p.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    found["predict"] = {i for i, row in enumerate(rows) if row["abstained"]}
    return found


def test_target_coverage_is_fitted_on_dev_and_every_consumer_abstains_on_the_same_texts(tiny_config_args, data_dir,
                                                                                        tmp_path, capsys):
    args = tiny_config_args + ["train.decision.target_coverage=0.8", "train.epochs=1"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    dev, test = results["dev"]["decision"], results["test"]["decision"]
    assert dev["coverage"] >= 0.8 and dev["coverage"] <= 0.8 + 2 / 60  # ties at the threshold may answer one more
    assert test["abstain_below"] == dev["abstain_below"]  # test is scored at dev's threshold
    meta = json.loads((out / "best" / "paddle_ft.json").read_text(encoding="utf-8"))
    assert meta["abstain_below"] == dev["abstain_below"]
    capsys.readouterr()
    assert main(["eval", "--model", str(out / "best"), "--data", str(data_dir / "test.tsv")]) == 0
    evaluated = json.loads(capsys.readouterr().out)["decision"]
    assert evaluated["coverage"] == pytest.approx(test["coverage"]) and evaluated["abstained"] == test["abstained"]
    texts = [line.split("\t")[0] for line in (data_dir / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    found = abstained_by_every_consumer(tmp_path, texts, out)
    assert len(found["paddle"]) == evaluated["abstained"] > 0
    assert all(indices == found["paddle"] for indices in found.values()), found


@pytest.mark.slow
def test_the_server_abstains_on_the_same_texts_and_a_request_may_set_its_own_threshold(tiny_config_args, data_dir,
                                                                                      tmp_path):
    import httpx

    from bench.server_process import ServerProcess

    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + ["train.decision.target_coverage=0.8",
                                                                           "train.epochs=1"])]) == 0
    out = tmp_path / "out"
    texts = [line.split("\t")[0] for line in (data_dir / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    expected = abstained_by_every_consumer(tmp_path, texts, out)["paddle"]
    server = ServerProcess(out / "export", tmp_path / "server.log", "--threads", "1")
    try:
        answers = [r for start in range(0, len(texts), 32) for r in httpx.post(
            f"{server.url}/v1/classify", json={"texts": texts[start:start + 32]}, timeout=60).json()["results"]]
        strict = httpx.post(f"{server.url}/v1/classify", json={"texts": texts[:32], "abstain_below": 1.0},
                            timeout=60).json()["results"]
        wrong = httpx.post(f"{server.url}/v1/classify", json={"texts": texts[:1], "abstain_below": 2}, timeout=60)
        as_text = httpx.post(f"{server.url}/v1/classify", json={"texts": texts[:1], "abstain_below": "0.5"},
                             timeout=60)
    finally:
        assert server.stop() == 0
    assert {i for i, answer in enumerate(answers) if answer["abstained"]} == expected
    assert all(answer["abstained"] for answer in strict if answer["score"] < 1.0)
    assert wrong.status_code == 422 and "abstain_below=2" in wrong.json()["error"]["message"]
    assert as_text.status_code == 422


# issue 43, root 5: every consumer of the decision handles 0% and 100% coverage
@pytest.mark.parametrize("setting, coverage", [("train.decision.abstain_below=1.0", 0.0),
                                               ("train.decision.abstain_below=0.0", 1.0)])
def test_a_model_that_answers_nothing_or_everything_trains_reports_and_evaluates(setting, coverage, tiny_config_args,
                                                                                 data_dir, tmp_path, capsys):
    args = tiny_config_args + [setting, "train.epochs=1", "train.runtime.write_report=true"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    out = tmp_path / "out"
    test = json.loads((out / "results.json").read_text(encoding="utf-8"))["test"]["decision"]
    assert test["coverage"] == coverage and (test["answered_accuracy"] is None) == (coverage == 0.0)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert ("it answers none of the texts: all 60 go to a person" in page) == (coverage == 0.0)
    assert "answered" in (out / "best" / "MODEL_CARD.md").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["eval", "--model", str(out / "best"), "--data", str(data_dir / "test.tsv")]) == 0
    assert json.loads(capsys.readouterr().out)["decision"]["coverage"] == coverage
