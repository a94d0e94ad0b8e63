"""Classification metrics as pure functions of gold and predicted class ids."""
from __future__ import annotations

import numpy as np


def classification_report(gold: np.ndarray, predicted: np.ndarray, names: tuple[str, ...]) -> dict:
    """Accuracy, macro-F1 and per-class precision / recall / F1 / support.

    A class never predicted has precision 0; a class absent from `gold` has recall 0 (and support 0),
    so macro-F1 counts every class the model can output.
    """
    gold = np.asarray(gold)
    predicted = np.asarray(predicted)
    per_class = {}
    f1s = []
    for class_id, name in enumerate(names):
        true_positive = int(np.sum((predicted == class_id) & (gold == class_id)))
        predicted_count = int(np.sum(predicted == class_id))
        support = int(np.sum(gold == class_id))
        precision = true_positive / predicted_count if predicted_count else 0.0
        recall = true_positive / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {"precision": precision, "recall": recall, "f1": f1, "support": support}
        f1s.append(f1)
    return {"accuracy": float(np.mean(gold == predicted)) if len(gold) else 0.0,
            "macro_f1": float(np.mean(f1s)),
            "examples": int(len(gold)),
            "per_class": per_class}
