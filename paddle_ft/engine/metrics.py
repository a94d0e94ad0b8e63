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
            "intervals": bootstrap_intervals(gold, predicted, len(names)),
            "per_class": per_class}


def bootstrap_intervals(gold: np.ndarray, predicted: np.ndarray, num_classes: int, rounds: int = 1000,
                        level: float = 0.95, seed: int = 0) -> dict:
    """95% percentile-bootstrap intervals of accuracy and macro-F1: the texts resampled with replacement `rounds`
    times (a fixed seed, so a report is reproducible). How far a score could move on another sample of the same
    size; an empty split has none."""
    if len(gold) == 0:
        return {}
    samples = np.random.default_rng(seed).integers(0, len(gold), size=(rounds, len(gold)))
    g, p = gold[samples], predicted[samples]  # [rounds, texts]
    accuracy = (g == p).mean(axis=1)
    cells = np.arange(rounds)[:, None] * num_classes * num_classes + g * num_classes + p
    confusion = np.bincount(cells.ravel(), minlength=rounds * num_classes ** 2).reshape(rounds, num_classes,
                                                                                          num_classes)
    true_positive = np.diagonal(confusion, axis1=1, axis2=2)
    precision = true_positive / np.maximum(confusion.sum(axis=1), 1)  # columns: predicted
    recall = true_positive / np.maximum(confusion.sum(axis=2), 1)  # rows: gold
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    return {"accuracy": _interval(accuracy, level), "macro_f1": _interval(f1.mean(axis=1), level)}


def _interval(values: np.ndarray, level: float) -> list[float]:
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))]


def multi_label_report(gold: np.ndarray, predicted: np.ndarray, names: tuple[str, ...]) -> dict:
    """Micro- and macro-F1, subset accuracy, Hamming loss and per-label precision / recall / F1 / support of
    0/1 label sets: gold and predicted [texts, labels]. A label never predicted has precision 0, one absent
    from `gold` recall 0, as in `classification_report`."""
    gold, predicted = np.asarray(gold) > 0.5, np.asarray(predicted).astype(bool)
    true_positive = (gold & predicted).sum(axis=0)
    predicted_count, support = predicted.sum(axis=0), gold.sum(axis=0)
    per_label = {}
    for i, name in enumerate(names):
        precision, recall = _ratio(true_positive[i], predicted_count[i]), _ratio(true_positive[i], support[i])
        per_label[name] = {"precision": precision, "recall": recall, "f1": _f1(precision, recall),
                           "support": int(support[i])}
    micro_precision = _ratio(true_positive.sum(), predicted_count.sum())
    micro_recall = _ratio(true_positive.sum(), support.sum())
    return {"micro_f1": _f1(micro_precision, micro_recall), "micro_precision": micro_precision,
            "micro_recall": micro_recall, "macro_f1": float(np.mean([s["f1"] for s in per_label.values()])),
            "subset_accuracy": float(np.mean((gold == predicted).all(axis=1))) if len(gold) else 0.0,
            "hamming_loss": float(np.mean(gold != predicted)) if len(gold) else 0.0,
            "examples": int(len(gold)), "intervals": _multi_label_intervals(gold, predicted), "per_label": per_label}


def _multi_label_intervals(gold: np.ndarray, predicted: np.ndarray, rounds: int = 1000, level: float = 0.95,
                           seed: int = 0) -> dict:
    """As `bootstrap_intervals`, for micro-F1 and subset accuracy of label sets [texts, labels]."""
    if len(gold) == 0:
        return {}
    samples = np.random.default_rng(seed).integers(0, len(gold), size=(rounds, len(gold)))
    true_positive = (gold & predicted).sum(axis=1)[samples].sum(axis=1)
    guessed, actual = predicted.sum(axis=1)[samples].sum(axis=1), gold.sum(axis=1)[samples].sum(axis=1)
    micro_f1 = np.where(guessed + actual > 0, 2 * true_positive / np.maximum(guessed + actual, 1), 0.0)
    exact = (gold == predicted).all(axis=1)[samples].mean(axis=1)
    return {"micro_f1": _interval(micro_f1, level), "subset_accuracy": _interval(exact, level)}


def tune_thresholds(gold: np.ndarray, probabilities: np.ndarray, default: float = 0.5) -> np.ndarray:
    """Per label, the probability threshold (predict the label when p >= it) that maximises its F1 on these
    texts: halfway between two neighbouring probabilities, so a small shift of the scores does not flip the
    decision at the edge; on a tie, the one nearest `default`. A label without a positive text keeps `default`."""
    gold = np.asarray(gold) > 0.5
    thresholds = np.full(gold.shape[1], default, dtype=np.float64)
    for label in range(gold.shape[1]):
        positives = int(gold[:, label].sum())
        if positives == 0:
            continue
        order = np.argsort(-probabilities[:, label], kind="stable")
        scores, hits = probabilities[order, label].astype(np.float64), gold[order, label]
        cut = np.flatnonzero(np.diff(scores) < 0)  # predicting the first cut+1 texts: only between distinct scores
        cut = np.append(cut, len(scores) - 1)
        true_positive = np.cumsum(hits)[cut]
        f1 = 2 * true_positive / (cut + 1 + positives)
        edges = np.append((scores[cut[:-1]] + scores[cut[:-1] + 1]) / 2, scores[-1] / 2)
        best = np.flatnonzero(np.isclose(f1, f1.max(), rtol=0, atol=1e-12))
        thresholds[label] = edges[best[np.argmin(np.abs(edges[best] - default))]]
    return thresholds


def _ratio(part, whole) -> float:
    return float(part / whole) if whole else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def expected_calibration_error(probabilities: np.ndarray, gold: np.ndarray, bins: int = 15) -> float:
    """How far the top probability is from being right that often: the texts grouped into `bins` equal-width
    bins of their top probability, |accuracy - mean top probability| per bin, weighted by its share of texts
    (Guo et al., 2017)."""
    confidence, predicted = probabilities.max(axis=1), probabilities.argmax(axis=1)
    right = predicted == np.asarray(gold)
    which = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    error = 0.0
    for b in range(bins):
        members = which == b
        if members.any():
            error += members.mean() * abs(right[members].mean() - confidence[members].mean())
    return float(error)


def fit_temperature(logits: np.ndarray, gold: np.ndarray) -> float:
    """The temperature T minimising the negative log-likelihood of softmax(logits / T) on these texts
    (temperature scaling, Guo et al., 2017): it changes no prediction, only how sure they say they are. The NLL
    is convex in 1/T, so a golden-section search over 1/T in [1/100, 100] finds it."""
    logits, gold = logits.astype(np.float64), np.asarray(gold)

    def nll(inverse: float) -> float:
        scaled = logits * inverse
        top = scaled.max(axis=1, keepdims=True)
        log_normaliser = top[:, 0] + np.log(np.exp(scaled - top).sum(axis=1))
        return float(np.mean(log_normaliser - scaled[np.arange(len(gold)), gold]))

    low, high = np.log(1e-2), np.log(1e2)  # searched in log(1/T): the NLL stays unimodal there
    ratio = (np.sqrt(5) - 1) / 2
    for _ in range(80):
        a, b = high - ratio * (high - low), low + ratio * (high - low)
        if nll(np.exp(a)) <= nll(np.exp(b)):
            high = b
        else:
            low = a
    return float(1.0 / np.exp((low + high) / 2))


def abstain_threshold(confidence: np.ndarray, coverage: float) -> float:
    """The confidence at or above which `coverage` of the texts are answered (the top probability of the
    ceil(coverage * n)-th most confident text); ties at it answer a few more."""
    ordered = np.sort(confidence)[::-1]
    return float(ordered[max(int(np.ceil(coverage * len(ordered))) - 1, 0)])


def decision_report(probabilities: np.ndarray, gold: np.ndarray, abstain_below: float | None,
                    points: int = 20) -> dict:
    """What abstaining below a confidence does on labelled texts: at `abstain_below`, the share answered and their
    accuracy (beside the accuracy on all); and the risk-coverage curve, the accuracy of the answered texts at
    coverages 1/points ... 1 (the most confident first)."""
    confidence, right = probabilities.max(axis=1), probabilities.argmax(axis=1) == gold
    ranked = right[np.argsort(-confidence, kind="stable")]
    counts = [max(1, int(round(share * len(ranked)))) for share in np.arange(1, points + 1) / points]
    report = {"risk_coverage": [[round(n / len(ranked), 4), float(ranked[:n].mean())] for n in counts]}
    if abstain_below is not None:
        answered = confidence >= abstain_below
        report.update(abstain_below=float(abstain_below), coverage=float(answered.mean()),
                      answered_accuracy=float(right[answered].mean()) if answered.any() else None,
                      accuracy_of_all=float(right.mean()), abstained=int((~answered).sum()))
    return report
