"""The fine-tuning objective of a single-label classifier, and the scoring every classification objective shares."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import paddle

from paddle_ft.artifacts.meta import Decision
from paddle_ft.config import TASK_METRICS
from paddle_ft.data.features import Features, pack_batch, pad_batch
from paddle_ft.engine.batch_copies import to_device
from paddle_ft.engine.evaluate import predict_logits
from paddle_ft.engine.losses import classification_loss, level_loss
from paddle_ft.engine.metrics import (Answers, abstain_threshold, classification_report, decision_report,
                                      expected_calibration_error, fit_temperature, with_levels)
from paddle_ft.engine.objectives import Objective
from paddle_ft.models.hierarchy import Hierarchy
from paddle_ft.text import softmax


class ClassifierObjective(Objective):
    """Scoring shared by the classification objectives: logits per row, gathered back into row order."""

    label_names: tuple[str, ...]
    pad_token_id: int

    def _logits(self, model, features: Features, indices: list[int], autocast, packed: bool = False):
        """(logits [b, labels] float32, the batch) of the training examples `indices`, padded, or `packed` into one
        row without padding (train.runtime.packed_batches)."""
        if packed:
            batch = pack_batch(features, indices)
            with autocast():
                logits = model(*(to_device(batch[key]) for key in ("input_ids", "token_type_ids")),
                               position_ids=to_device(batch["position_ids"]),
                               offsets=to_device(batch["offsets"]))
            return logits.astype("float32"), batch
        batch = pad_batch(features, indices, self.pad_token_id)
        with autocast():
            logits = model(to_device(batch["input_ids"]), to_device(batch["token_type_ids"]))
        return logits.astype("float32"), batch

    def score(self, model, features: Features, subset: np.ndarray, batch_size: int, autocast):
        """This process's part of an evaluation: (row indices, their logits)."""
        return subset, predict_logits(model, features, batch_size, self.pad_token_id, subset, autocast)

    def _text_logits(self, features: Features, parts: list) -> np.ndarray:
        """[texts, labels]: the parts' logits in row order (each row scored exactly once), a text's windows pooled.
        One process's one part, of every row in order, is used as it is (of 20,000 labels a copy is gigabytes)."""
        if len(parts) == 1 and np.array_equal(parts[0][0], np.arange(len(features))):
            return features.pool(np.asarray(parts[0][1], dtype=np.float32))
        logits = np.zeros((len(features), len(self.label_names)), dtype=np.float32)
        for indices, part in parts:
            logits[indices] = part
        return features.pool(logits)


@dataclass(frozen=True)
class Classification(ClassifierObjective):
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
    target_coverage: float | None = None
    """A report fits the confidence below which the model abstains so that it answers this share of the texts it
    scores (dev), unless `abstain_below` fixes it."""
    abstain_below: float | None = None
    metrics: tuple[str, ...] = TASK_METRICS["single_label"]
    hierarchy: Hierarchy | None = None
    """The labels' tree (data.label_hierarchy): a report scores each level too."""
    level_loss: float = 0.0
    """With a tree: the weight of its upper levels' cross-entropy added to the leaves' (train.level_loss)."""
    packed: bool = False
    """Training batches packed into one row without padding (train.runtime.packed_batches)."""

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        """The summed (not averaged) loss of the examples `indices`, in float32."""
        logits, batch = self._logits(model, features, indices, autocast, self.packed)
        labels = to_device(batch["labels"])
        loss = classification_loss(logits, labels, self.loss_kind, self.class_weights, self.focal_gamma)
        if self.level_loss:
            loss = loss + self.level_loss * level_loss(logits, labels, self.hierarchy)
        return loss

    def shipped(self, part, features: Features):
        """Each row's top label and probability (`Answers`) instead of its logits, where the report needs no more:
        no temperature to fit, no tree of labels, no windows to pool. A 20,000-label dev set's logits went through
        pickle to every rank (docs/performance.md has the sizes and times on 2 gloo ranks)."""
        if self.calibration == "temperature" or self.hierarchy is not None or features.documents is not None:
            return part
        subset, logits = part
        return subset, Answers.of(softmax(logits))

    def report(self, features: Features, parts: list) -> dict:
        """The metrics of the parts together, with the expected calibration error of the probabilities (at the
        fitted temperature, with calibration)."""
        if isinstance(parts[0][1], Answers):
            return self._report_of_answers(features, parts)
        logits, gold = self._text_logits(features, parts), features.document_labels
        report = classification_report(gold, logits.argmax(axis=1), self.label_names)  # softmax keeps the order
        probabilities = softmax(logits)  # what the saved model will answer with, unless calibrated
        report["ece"] = expected_calibration_error(probabilities, gold)
        if self.calibration == "temperature":
            temperature = self.temperature or fit_temperature(logits, gold)
            probabilities = softmax(logits / temperature)
            report.update(ece_at_temperature_1=report["ece"], temperature=temperature,
                          ece=expected_calibration_error(probabilities, gold))
        del logits  # [texts, labels]: of 20,000 labels, a copy is gigabytes
        threshold = self._threshold(probabilities.max(axis=1))
        report["decision"] = decision_report(probabilities, gold, threshold)
        return with_levels(report, self.hierarchy, gold, probabilities, threshold)

    def _report_of_answers(self, features: Features, parts: list) -> dict:
        """report() of gathered `Answers`: the same metrics (no temperature, tree or windows: `shipped`)."""
        predicted = np.zeros(len(features), dtype=np.int64)
        confidence = np.zeros(len(features), dtype=np.float32)
        for indices, answers in parts:
            predicted[indices], confidence[indices] = answers.predicted, answers.confidence
        answers, gold = Answers(predicted, confidence), features.document_labels
        report = classification_report(gold, predicted, self.label_names)
        report["ece"] = expected_calibration_error(answers, gold)
        report["decision"] = decision_report(answers, gold, self._threshold(confidence))
        return report

    def _threshold(self, confidence: np.ndarray) -> float | None:
        """The abstain threshold: the one given, else the one that answers the target coverage of these texts."""
        if self.abstain_below is None and self.target_coverage is not None:
            return abstain_threshold(confidence, self.target_coverage)
        return self.abstain_below

    def calibrated(self, dev_report: dict | None) -> Classification:
        """What dev decided, fixed for test and the saved model: with calibration the temperature (1 without dev),
        with a target coverage the abstain threshold."""
        decided, fitted = self, Decision.from_report(dev_report, self.label_names)
        if self.calibration == "temperature":
            decided = replace(decided, temperature=fitted.temperature or 1.0)
        if self.target_coverage is not None and dev_report is not None:
            decided = replace(decided, abstain_below=fitted.abstain_below)
        return decided
