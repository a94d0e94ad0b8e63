"""Probability calibration of a single-label model (train.calibration: temperature): the temperature fitted on dev,
saved with the model, makes test probabilities as sure as the model is right, and changes no prediction."""
import json
import random

import numpy as np
import pytest
from conftest import DEMO, LABELS, overrides, synthetic_rows, write_tsv

from paddle_ft.config import load_config
from paddle_ft.engine.metrics import expected_calibration_error, fit_temperature
from paddle_ft.errors import ConfigError


def test_expected_calibration_error_is_exact():
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]])
    gold = np.array([0, 1, 1, 1])
    # bins of width 1/15: 0.9 -> bin 13 (right), 0.8 -> bin 12 (wrong), 0.7 -> bin 10 (right), 0.6 -> bin 9 (right)
    expected = (abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.7) + abs(1 - 0.6)) / 4
    assert expected_calibration_error(probs, gold) == pytest.approx(expected)


def test_the_fitted_temperature_undoes_a_known_overconfidence():
    rng = np.random.default_rng(0)
    true_logits = rng.normal(0, 2, size=(20000, 3))
    gold = np.array([rng.choice(3, p=np.exp(z) / np.exp(z).sum()) for z in true_logits])
    assert fit_temperature(true_logits * 3, gold) == pytest.approx(3, rel=0.05)  # 3x too sure -> T = 3
    assert fit_temperature(true_logits, gold) == pytest.approx(1, rel=0.05)


def test_multi_label_models_are_not_temperature_calibrated():
    with pytest.raises(ConfigError, match="'train.calibration' .*: is 'temperature', but a multi_label model"):
        load_config(DEMO, ["task=multi_label", "train.evaluation.metric=micro_f1", "train.calibration=temperature"])


def noisy_rows(n: int, seed: int) -> list[tuple[str, str]]:
    """The synthetic corpus with one label in four flipped: no model can be sure, an overtrained one is anyway."""
    rng = random.Random(seed)
    return [(text, LABELS[1 - LABELS.index(label)] if rng.random() < 0.25 else label)
            for text, label in synthetic_rows(n, seed)]


@pytest.mark.slow  # two trainings of a model big enough to memorise its noise (~25 s)
def test_temperature_from_dev_calibrates_test_and_changes_no_prediction(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main
    from paddle_ft.inference.predictor import Predictor

    data = tmp_path / "noisy"
    data.mkdir()
    # 400 rows 20 times over in one epoch: its one evaluation, at the end, picks the overtrained model
    write_tsv(data / "train.tsv", noisy_rows(400, 1) * 20)
    for split, n, seed in (("dev", 300, 2), ("test", 300, 3)):
        write_tsv(data / f"{split}.tsv", noisy_rows(n, seed))
    runs = {}
    for calibration in ("none", "temperature"):
        out = tmp_path / calibration
        args = tiny_config_args + [f"output_dir={out}", *(f"data.{s}={data / s}.tsv" for s in ("train", "dev", "test")),
                                   "train.epochs=1", "model.dropout=0", "model.scratch.hidden_size=64",
                                   "train.optimizer.learning_rate=1e-3",
                                   "model.scratch.intermediate_size=128", f"train.calibration={calibration}"]
        assert main(["train", "--config", DEMO, *overrides(args)]) == 0
        runs[calibration] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    plain, calibrated = runs["none"]["test"], runs["temperature"]["test"]
    assert calibrated["accuracy"] == plain["accuracy"] and calibrated["per_class"] == plain["per_class"]
    temperature = runs["temperature"]["dev"]["temperature"]
    assert temperature > 1.5 and calibrated["temperature"] == temperature  # test: dev's, not fitted on test
    assert calibrated["ece_at_temperature_1"] == pytest.approx(plain["ece"])
    assert calibrated["ece"] < 0.6 * plain["ece"], (calibrated["ece"], plain["ece"])

    out = tmp_path / "temperature"
    assert json.loads((out / "best" / "paddle_ft.json").read_text(encoding="utf-8"))["temperature"] == temperature
    assert main(["export", "--model", str(out / "best"), "--output", str(out / "export")]) == 0
    capsys.readouterr()
    assert main(["eval", "--model", str(out / "best"), "--data", str(data / "test.tsv")]) == 0
    assert json.loads(capsys.readouterr().out)["ece"] == pytest.approx(calibrated["ece"], abs=1e-6)
    texts = [text for text, _ in noisy_rows(300, 3)]
    sure = np.array([p.score for p in Predictor(out / "export").predict(texts)])
    plain_sure = np.array([p.score for p in Predictor(_exported(tmp_path / "none")).predict(texts)])
    assert sure.mean() < plain_sure.mean() - 0.05  # the exported model says how sure it is, as calibrated


def _exported(run):
    from paddle_ft.cli import main

    assert main(["export", "--model", str(run / "best"), "--output", str(run / "export")]) == 0
    return run / "export"
