"""The multi-label objective: a sigmoid per label, thresholds tuned on dev."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import paddle

from paddle_ft.config import TASK_METRICS
from paddle_ft.data.features import Features
from paddle_ft.engine.batch_copies import to_device
from paddle_ft.engine.losses import multi_label_loss
from paddle_ft.engine.metrics import multi_label_report, tune_thresholds, with_levels
from paddle_ft.engine.objectives.classification import ClassifierObjective
from paddle_ft.models.hierarchy import Hierarchy
from paddle_ft.text import sigmoid


@dataclass(frozen=True)
class MultiLabelClassification(ClassifierObjective):
    """The multi-label objective: a sigmoid per label with binary cross-entropy; a label is predicted when its
    probability reaches its threshold. Scored by micro- and macro-F1 and subset accuracy (Hamming loss too).

    With `thresholds` None, a report tunes each label's threshold on the texts it scores (`tune_thresholds`),
    which is what dev is for, and says which it chose; `calibrated` then fixes them for test and the saved
    model. Without dev they are 0.5."""

    label_names: tuple[str, ...]
    pad_token_id: int
    thresholds: tuple[float, ...] | None = None
    metrics: tuple[str, ...] = TASK_METRICS["multi_label"]
    hierarchy: Hierarchy | None = None
    """The labels' tree (data.label_hierarchy): a report scores each level too."""

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        """The summed (not averaged) loss of the examples `indices`, in float32."""
        logits, batch = self._logits(model, features, indices, autocast)
        return multi_label_loss(logits, to_device(batch["labels"]))

    def report(self, features: Features, parts: list) -> dict:
        """The metrics of the parts together, at the fixed thresholds or at those tuned on these texts."""
        probs, gold = sigmoid(self._text_logits(features, parts)), features.document_labels
        tuned = tune_thresholds(gold, probs) if self.thresholds is None else np.asarray(self.thresholds)
        report = multi_label_report(gold, probs >= tuned, self.label_names)
        report = with_levels(report, self.hierarchy, gold, probs >= tuned)
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
