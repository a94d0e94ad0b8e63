"""Class weights and the focal loss, checked against the formulas computed by hand in NumPy."""
import json
import random

import numpy as np
import paddle
import pytest

from paddle_ft.config import load_config
from paddle_ft.engine.losses import balanced_class_weights, class_weights, classification_loss
from paddle_ft.errors import ConfigError
from conftest import DEMO, NEUTRAL_CHARS, overrides, write_tsv

LOGITS = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, 3.0], [-0.5, 1.5, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)
LABELS = np.array([0, 2, 0, 1])


def gold_log_p() -> np.ndarray:
    shifted = LOGITS - LOGITS.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return log_p[np.arange(len(LABELS)), LABELS]


def loss(kind="cross_entropy", weights=None, gamma=2.0) -> float:
    return float(classification_loss(paddle.to_tensor(LOGITS), paddle.to_tensor(LABELS), kind, weights, gamma))


def test_auto_weights_are_inverse_frequency_and_the_average_example_weighs_one():
    labels = np.array([0] * 20 + [1] * 1)  # 1:20
    weights = balanced_class_weights(labels, ("common", "rare"))
    assert weights == (21 / (2 * 20), 21 / 2)  # 0.525 and 10.5
    assert np.mean([weights[y] for y in labels]) == pytest.approx(1.0)
    assert class_weights("auto", labels, ("common", "rare")) == weights
    assert class_weights(None, labels, ("common", "rare")) is None
    assert class_weights((1.0, 3.0), labels, ("common", "rare")) == (1.0, 3.0)


def test_auto_weights_refuse_a_label_without_training_examples_and_lists_must_match_the_labels():
    with pytest.raises(ConfigError, match="'train.class_weights': auto weighs .* but rare has none"):
        balanced_class_weights(np.array([0, 0]), ("common", "rare"))
    with pytest.raises(ConfigError, match=r"has 3 weights for 2 labels \(common, rare\)"):
        class_weights((1.0, 2.0, 3.0), np.array([0, 1]), ("common", "rare"))


def test_weighted_cross_entropy_and_focal_loss_equal_their_formulas():
    log_p = gold_log_p()
    weights = (0.5, 2.0, 1.5)
    w = np.array(weights)[LABELS]
    assert loss() == pytest.approx(-log_p.sum(), rel=1e-6)
    assert loss(weights=weights) == pytest.approx(-(w * log_p).sum(), rel=1e-6)
    assert loss("focal", gamma=0.0) == pytest.approx(loss(), rel=1e-6)  # gamma 0 is cross-entropy
    focal = -((1 - np.exp(log_p)) ** 2 * log_p)
    assert loss("focal") == pytest.approx(focal.sum(), rel=1e-6)
    assert loss("focal", weights=weights, gamma=2.0) == pytest.approx((w * focal).sum(), rel=1e-6)
    assert loss("focal") < loss()  # every example's loss is turned down, the confident ones most


def test_focal_loss_gradient_matches_finite_differences():
    logits = paddle.to_tensor(LOGITS, stop_gradient=False)
    classification_loss(logits, paddle.to_tensor(LABELS), "focal", (0.5, 2.0, 1.5)).backward()
    eps, numeric = 1e-2, np.zeros_like(LOGITS)
    for i, j in np.ndindex(*LOGITS.shape):
        for sign in (1, -1):
            moved = LOGITS.astype(np.float64).copy()
            moved[i, j] += sign * eps
            value = classification_loss(paddle.to_tensor(moved.astype(np.float32)), paddle.to_tensor(LABELS),
                                        "focal", (0.5, 2.0, 1.5))
            numeric[i, j] += sign * float(value) / (2 * eps)
    np.testing.assert_allclose(logits.grad.numpy(), numeric, atol=2e-3)


@pytest.mark.parametrize("override, message", [
    ("train.class_weights=balanced", "expected auto or a list of positive numbers, one per label, got 'balanced'"),
    ("train.class_weights=[1, 0]", "expected auto or a list of positive numbers, one per label, got \\[1, 0\\]"),
    ("train.class_weights=[1, 2, 3]", r"has 3 weights for 2 labels \(负面, 正面\): give one per label"),
    ("train.loss=dice", "expected one of cross_entropy, focal, got 'dice'"),
    ("train.focal_gamma=-1", "expected a number >= 0, got -1"),
])
def test_loss_keys_are_validated_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(DEMO, [override])


def imbalanced_rows(common: int, rare: int, seed: int) -> list[tuple[str, str]]:
    """正面 is the rare class. Its keyword 好 is in all its texts but also in 10% of the common ones, so at 1:20
    a text with 好 is still more likely common (1 x 1 < 0.1 x 20): unweighted, the best answer is never rare."""
    rng = random.Random(seed)
    rows = []
    for label, count, share in (("负面", common, 0.1), ("正面", rare, 1.0)):
        for _ in range(count):
            chars = [rng.choice(NEUTRAL_CHARS) for _ in range(rng.randint(6, 16))]
            if rng.random() < share:
                chars.insert(rng.randrange(len(chars)), "好")
            rows.append(("".join(chars), label))
    rng.shuffle(rows)
    return rows


def test_auto_class_weights_raise_the_recall_of_a_rare_class(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main

    data = tmp_path / "imbalanced"
    data.mkdir()
    write_tsv(data / "train.tsv", imbalanced_rows(800, 40, seed=1))  # 1:20
    write_tsv(data / "dev.tsv", imbalanced_rows(200, 50, seed=2))
    write_tsv(data / "test.tsv", imbalanced_rows(200, 100, seed=3))
    recall = {}
    for name, extra in (("plain", []), ("weighted", ["train.class_weights=auto"])):
        args = tiny_config_args + [f"output_dir={tmp_path / name}", f"data.train={data / 'train.tsv'}",
                                   f"data.dev={data / 'dev.tsv'}", f"data.test={data / 'test.tsv'}",
                                   "train.evaluation.metric=macro_f1", "train.epochs=4", *extra]
        assert main(["train", "--config", DEMO, *overrides(args)]) == 0
        results = json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))
        recall[name] = results["test"]["per_class"]["正面"]["recall"]
    assert "class weights (auto: inverse class frequency): 负面 0.525, 正面 10.5" in capsys.readouterr().out
    assert recall["plain"] < 0.2 and recall["weighted"] > 0.9  # measured: 0.0 and 1.0
