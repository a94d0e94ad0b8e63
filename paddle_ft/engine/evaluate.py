"""Scoring a classifier on tokenised features (probabilities, the classification report), and the
fine-tuning objective the training loop calls.

Imported by the training loop and by the `eval` command alike; it imports nothing of the loop, its
checkpoints or its collectives.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import paddle

from paddle_ft.data.features import Features, eval_batches, pad_batch, softmax
from paddle_ft.engine.losses import classification_loss
from paddle_ft.engine.metrics import classification_report
from paddle_ft.errors import UserError


class NonFiniteScores(UserError):
    """The model's outputs are NaN/inf: its weights are not finite, and it must not be reported as scoring."""


@paddle.no_grad()
def predict_logits(model, features: Features, batch_size: int, pad_token_id: int,
                   subset: np.ndarray | None = None, autocast=contextlib.nullcontext) -> np.ndarray:
    """Logits [n, num_classes] of the rows of `features` (or of the rows in `subset`), in order, computed
    under `autocast()` (training's precision)."""
    model.eval()
    subset = np.arange(len(features)) if subset is None else np.asarray(subset)
    out = np.zeros((len(subset), model.classifier.weight.shape[1]), dtype=np.float32)
    for positions in eval_batches(features.lengths[subset], batch_size):
        batch = pad_batch(features, subset[positions].tolist(), pad_token_id)
        with autocast():
            logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
        out[positions] = logits.astype("float32").numpy()  # [batch, num_classes]
    if not np.isfinite(out).all():  # NaN weights score "accuracy" by chance: never report that as a result
        raise NonFiniteScores("the model's scores are NaN/inf: its weights are not finite (training diverged); "
                               "retrain with a lower train.optimizer.learning_rate, or use an earlier checkpoint")
    return out


def text_probabilities(features: Features, logits: np.ndarray) -> np.ndarray:
    """Softmax probabilities [texts, num_classes] from every row's logits: a text's windows pooled first."""
    return softmax(features.pool(logits))


def predict_probabilities(model, features: Features, batch_size: int, pad_token_id: int,
                          autocast=contextlib.nullcontext) -> np.ndarray:
    """Softmax probabilities [texts, num_classes] of `features`, in order."""
    return text_probabilities(features, predict_logits(model, features, batch_size, pad_token_id, autocast=autocast))


def evaluate(model, features: Features, batch_size: int, pad_token_id: int,
             label_names: tuple[str, ...], autocast=contextlib.nullcontext) -> tuple[dict, np.ndarray]:
    """(classification report, probabilities) of `model` on labelled `features`, one row per text."""
    probs = predict_probabilities(model, features, batch_size, pad_token_id, autocast=autocast)
    return classification_report(features.document_labels, probs.argmax(axis=1), label_names), probs


@dataclass(frozen=True)
class Classification:
    """The fine-tuning objective: cross-entropy (or focal loss, optionally class-weighted) over the labels;
    scored by accuracy and macro-F1."""

    label_names: tuple[str, ...]
    pad_token_id: int
    loss_kind: str = "cross_entropy"
    class_weights: tuple[float, ...] | None = None
    """One weight per label (None = all 1)."""
    focal_gamma: float = 2.0
    metrics: tuple[str, ...] = ("accuracy", "macro_f1")

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        """The summed (not averaged) loss of the examples `indices`, in float32."""
        batch = pad_batch(features, indices, self.pad_token_id)
        with autocast():
            logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
        return classification_loss(logits.astype("float32"), paddle.to_tensor(batch["labels"]), self.loss_kind,
                                   self.class_weights, self.focal_gamma)

    def score(self, model, features: Features, subset: np.ndarray, batch_size: int, autocast):
        """This process's part of an evaluation: (row indices, their logits)."""
        return subset, predict_logits(model, features, batch_size, self.pad_token_id, subset, autocast)

    def report(self, features: Features, parts: list) -> dict:
        """The metrics of the parts together (each row scored exactly once; a text's windows pooled)."""
        logits = np.zeros((len(features), len(self.label_names)), dtype=np.float32)
        for indices, part in parts:
            logits[indices] = part
        probs = text_probabilities(features, logits)
        return classification_report(features.document_labels, probs.argmax(axis=1), self.label_names)
