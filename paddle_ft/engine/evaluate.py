"""Scoring a classifier on tokenised features (probabilities, the classification report), and the
fine-tuning objective the training loop calls.

Imported by the training loop and by the `eval` command alike; it imports nothing of the loop, its
checkpoints or its collectives.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import numpy as np
import paddle

from paddle_ft.config import TASK_METRICS
from paddle_ft.data.features import Features, eval_batches, pad_batch
from paddle_ft.engine.losses import classification_loss, multi_label_loss
from paddle_ft.engine.metrics import (classification_report, expected_calibration_error, fit_temperature,
                                      multi_label_report, tune_thresholds)
from paddle_ft.errors import UserError
from paddle_ft.text import sigmoid, softmax


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


def evaluate(model, features: Features, batch_size: int, pad_token_id: int, label_names: tuple[str, ...],
             autocast=contextlib.nullcontext, thresholds: tuple[float, ...] | None = None,
             temperature: float = 1.0) -> tuple[dict, np.ndarray]:
    """(classification report, probabilities) of `model` on labelled `features`, one row per text: the softmax
    of the logits / `temperature`; with `thresholds`, of a multi-label model (a sigmoid per label, predicted
    at or above its threshold)."""
    logits = features.pool(predict_logits(model, features, batch_size, pad_token_id, autocast=autocast))
    if thresholds is None:
        probs, gold = softmax(logits / temperature), features.document_labels
        report = classification_report(gold, probs.argmax(axis=1), label_names)
        return {**report, "ece": expected_calibration_error(probs, gold)}, probs
    probs = sigmoid(logits)
    report = multi_label_report(features.document_labels, probs >= np.asarray(thresholds), label_names)
    return {**report, "thresholds": dict(zip(label_names, thresholds))}, probs


class Objective:
    """What the training loop asks of a task: `loss` of some training examples, `score` (this process's part of
    an evaluation), `report` (the metrics of the gathered parts), and `calibrated`."""

    metrics: tuple[str, ...] = ()
    """The report's metrics that can pick the best model (higher is better)."""

    def calibrated(self, dev_report: dict | None) -> Objective:
        """The objective with what the dev evaluation decided fixed, for scoring test and saving the model (dev
        None: there was none). Most objectives decide nothing."""
        return self


class _Classifier(Objective):
    """Scoring shared by the classification objectives: logits per row, gathered back into row order."""

    label_names: tuple[str, ...]
    pad_token_id: int

    def _logits(self, model, features: Features, indices: list[int], autocast):
        """(logits [b, labels] float32, the padded batch) of the training examples `indices`."""
        batch = pad_batch(features, indices, self.pad_token_id)
        with autocast():
            logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
        return logits.astype("float32"), batch

    def score(self, model, features: Features, subset: np.ndarray, batch_size: int, autocast):
        """This process's part of an evaluation: (row indices, their logits)."""
        return subset, predict_logits(model, features, batch_size, self.pad_token_id, subset, autocast)

    def _text_logits(self, features: Features, parts: list) -> np.ndarray:
        """[texts, labels]: the parts' logits in row order (each row scored exactly once), a text's windows pooled."""
        logits = np.zeros((len(features), len(self.label_names)), dtype=np.float32)
        for indices, part in parts:
            logits[indices] = part
        return features.pool(logits)


@dataclass(frozen=True)
class Classification(_Classifier):
    """The fine-tuning objective: cross-entropy (or focal loss, optionally class-weighted) over the labels;
    scored by accuracy and macro-F1."""

    label_names: tuple[str, ...]
    pad_token_id: int
    loss_kind: str = "cross_entropy"
    class_weights: tuple[float, ...] | None = None
    """One weight per label (None = all 1)."""
    focal_gamma: float = 2.0
    calibration: str = "none"
    """temperature: a report fits the temperature on the texts it scores, unless `temperature` fixes it."""
    temperature: float | None = None
    metrics: tuple[str, ...] = TASK_METRICS["single_label"]

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        """The summed (not averaged) loss of the examples `indices`, in float32."""
        logits, batch = self._logits(model, features, indices, autocast)
        return classification_loss(logits, paddle.to_tensor(batch["labels"]), self.loss_kind, self.class_weights,
                                   self.focal_gamma)

    def report(self, features: Features, parts: list) -> dict:
        """The metrics of the parts together, with the expected calibration error of the probabilities (at the
        fitted temperature, with calibration)."""
        logits, gold = self._text_logits(features, parts), features.document_labels
        report = classification_report(gold, logits.argmax(axis=1), self.label_names)  # softmax keeps the order
        report["ece"] = expected_calibration_error(softmax(logits), gold)
        if self.calibration == "temperature":
            temperature = self.temperature or fit_temperature(logits, gold)
            report.update(ece_at_temperature_1=report["ece"], temperature=temperature,
                          ece=expected_calibration_error(softmax(logits / temperature), gold))
        return report

    def calibrated(self, dev_report: dict | None) -> Classification:
        """With calibration, the temperature fitted on dev (1 without dev) fixed."""
        if self.calibration != "temperature":
            return self
        return replace(self, temperature=dev_report["temperature"] if dev_report else 1.0)


@dataclass(frozen=True)
class MultiLabelClassification(_Classifier):
    """The multi-label objective: a sigmoid per label with binary cross-entropy; a label is predicted when its
    probability reaches its threshold. Scored by micro- and macro-F1 and subset accuracy (Hamming loss too).

    With `thresholds` None, a report tunes each label's threshold on the texts it scores (`tune_thresholds`),
    which is what dev is for, and says which it chose; `calibrated` then fixes them for test and the saved
    model. Without dev they are 0.5."""

    label_names: tuple[str, ...]
    pad_token_id: int
    thresholds: tuple[float, ...] | None = None
    metrics: tuple[str, ...] = TASK_METRICS["multi_label"]

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        """The summed (not averaged) loss of the examples `indices`, in float32."""
        logits, batch = self._logits(model, features, indices, autocast)
        return multi_label_loss(logits, paddle.to_tensor(batch["labels"]))

    def report(self, features: Features, parts: list) -> dict:
        """The metrics of the parts together, at the fixed thresholds or at those tuned on these texts."""
        probs, gold = sigmoid(self._text_logits(features, parts)), features.document_labels
        tuned = tune_thresholds(gold, probs) if self.thresholds is None else np.asarray(self.thresholds)
        report = multi_label_report(gold, probs >= tuned, self.label_names)
        report["thresholds"] = dict(zip(self.label_names, map(float, tuned)))
        if self.thresholds is None:  # what tuning gained over 0.5 on these texts
            at_half = multi_label_report(gold, probs >= 0.5, self.label_names)
            report["at_threshold_0.5"] = {m: at_half[m] for m in (*self.metrics, "hamming_loss")}
        return report

    def calibrated(self, dev_report: dict | None) -> MultiLabelClassification:
        """The objective with dev's tuned thresholds (0.5 for every label without dev) fixed."""
        if dev_report is None:
            return replace(self, thresholds=(0.5,) * len(self.label_names))
        return replace(self, thresholds=tuple(dev_report["thresholds"][name] for name in self.label_names))
