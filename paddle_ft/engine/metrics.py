"""Classification metrics as pure functions of gold and predicted class ids."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOOTSTRAP_CHUNK = 50  # resampling rounds counted at once
MANY_CLASSES = 30  # above this many classes a per-class table is shown as its best and worst rows, not whole
SHOWN_CLASSES = 10  # best and worst rows shown of such a table
MIN_TUNING_POSITIVES = 5  # a multi-label label with fewer dev positives shares one threshold with the others alike


def per_class_extremes(table: dict, shown: int = SHOWN_CLASSES) -> tuple[list[str], list[str]]:
    """(the `shown` best classes by F1, best first; the `shown` worst, worst first) among those with texts in the
    split, ties by name; a table of at most twice `shown` such classes is all best."""
    present = sorted((name for name, row in table.items() if row["support"]), key=lambda n: (-table[n]["f1"], n))
    if len(present) <= 2 * shown:
        return present, []
    return present[:shown], present[::-1][:shown]


def classification_report(gold: np.ndarray, predicted: np.ndarray, names: tuple[str, ...]) -> dict:
    """Accuracy, macro-F1 and per-class precision / recall / F1 / support.

    A class never predicted has precision 0; a class absent from `gold` has recall 0 (and support 0),
    so macro-F1 counts every class the model can output.
    """
    gold = np.asarray(gold)
    predicted = np.asarray(predicted)
    precision, recall, f1, support = _class_scores(gold, predicted, len(names))
    per_class = {name: {"precision": float(precision[c]), "recall": float(recall[c]), "f1": float(f1[c]),
                        "support": int(support[c])} for c, name in enumerate(names)}
    return {"accuracy": float(np.mean(gold == predicted)) if len(gold) else 0.0,
            "macro_f1": float(np.mean(f1)),
            "examples": int(len(gold)),
            "intervals": bootstrap_intervals(gold, predicted, len(names)),
            "per_class": per_class}


def _class_scores(gold: np.ndarray, predicted: np.ndarray, num_classes: int):
    """(precision, recall, F1, support) per class [classes] of class ids [texts], or per round [rounds, classes] of
    ids [rounds, texts]. By counting, linear in texts + classes: 20,000 classes cost no more than 2. A class never
    predicted has precision 0, one absent from `gold` recall 0."""
    g, p = np.atleast_2d(gold), np.atleast_2d(predicted)
    cells = g + np.arange(len(g))[:, None] * num_classes  # [rounds, texts]: (round, gold class) as one id
    guesses = p + np.arange(len(p))[:, None] * num_classes
    true_positive, guessed, support = (np.bincount(ids.ravel(), minlength=len(g) * num_classes).reshape(
        len(g), num_classes) for ids in (cells[g == p], guesses, cells))
    precision, recall = true_positive / np.maximum(guessed, 1), true_positive / np.maximum(support, 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    scores = (precision, recall, f1, support)
    return tuple(x[0] for x in scores) if np.ndim(gold) == 1 else scores


def bootstrap_intervals(gold: np.ndarray, predicted: np.ndarray, num_classes: int, rounds: int = 1000,
                        level: float = 0.95, seed: int = 0) -> dict:
    """95% percentile-bootstrap intervals of accuracy and macro-F1: the texts resampled with replacement `rounds`
    times (a fixed seed, so a report is reproducible). How far a score could move on another sample of the same
    size; an empty split has none."""
    if len(gold) == 0:
        return {}
    rng, accuracy, macro_f1 = np.random.default_rng(seed), [], []
    for start in range(0, rounds, BOOTSTRAP_CHUNK):  # memory bounded: rounds x texts at a time, not all of them
        samples = rng.integers(0, len(gold), size=(min(BOOTSTRAP_CHUNK, rounds - start), len(gold)))
        g, p = gold[samples], predicted[samples]  # [rounds, texts]
        accuracy.append((g == p).mean(axis=1))
        macro_f1.append(_class_scores(g, p, num_classes)[2].mean(axis=1))
    return {"accuracy": _interval(np.concatenate(accuracy), level),
            "macro_f1": _interval(np.concatenate(macro_f1), level)}


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


def with_levels(report: dict, hierarchy, gold: np.ndarray, answers: np.ndarray,
                abstain_below: float | None = None) -> dict:
    """`report` with each level of a label tree scored (`level_report`; nothing added without a tree). Single-label
    `answers` are the softmax probabilities over the leaves [texts, leaves], and under `abstain_below` the decision
    says what abstaining per level does; multi-label ones the chosen leaves [texts, leaves] bool."""
    if hierarchy is None:
        return report
    multi = answers.dtype == bool
    report = {**report, "levels": level_report(hierarchy, gold, answers if multi else answers.argmax(axis=1))}
    if not multi and abstain_below is not None:
        report["decision"] = {**report["decision"],
                              "levels": level_decision(hierarchy, answers, gold, abstain_below)}
    return report


def level_report(hierarchy, gold: np.ndarray, predicted: np.ndarray) -> list[dict]:
    """Per level of a label tree (`paddle_ft.models.hierarchy.Hierarchy`), top first, the answers read at that level:
    accuracy and macro-F1 of leaf ids [texts], or micro-F1 and subset accuracy of leaf sets [texts, leaves] (the
    nodes above any chosen leaf). The last level is the whole path."""
    levels = []
    for level in range(1, hierarchy.depth + 1):
        if np.ndim(gold) == 1:
            ids = hierarchy.node_ids(level)
            g, p = ids[np.asarray(gold)], ids[np.asarray(predicted)]
            scores = {"accuracy": float(np.mean(g == p)) if len(g) else 0.0,
                      "macro_f1": float(np.mean(_class_scores(g, p, len(hierarchy.names[level - 1]))[2]))}
        else:
            report = multi_label_report(hierarchy.sets(np.asarray(gold) > 0.5, level),
                                        hierarchy.sets(np.asarray(predicted).astype(bool), level),
                                        hierarchy.names[level - 1])
            scores = {key: report[key] for key in ("micro_f1", "macro_f1", "subset_accuracy")}
        levels.append({"level": level, "nodes": len(hierarchy.names[level - 1]), **scores})
    return levels


def level_decision(hierarchy, probabilities: np.ndarray, gold: np.ndarray, abstain_below: float) -> dict:
    """What abstaining per level does on labelled texts (softmax over leaves [texts, leaves], gold leaf ids): each
    text answered by its deepest level whose most probable node reaches `abstain_below` (`Hierarchy.answer`). The
    share answered at each level and at none, and of the answers the share right (the node is on the gold path)."""
    level_of = np.zeros(len(gold), dtype=np.int64)  # 0: no level sure enough
    right = np.zeros(len(gold), dtype=bool)
    for level in range(hierarchy.depth, 0, -1):
        nodes = hierarchy.marginals(probabilities, level)
        best = nodes.argmax(axis=1)
        chosen = (level_of == 0) & (nodes.max(axis=1) >= abstain_below)
        level_of[chosen] = level
        right[chosen] = hierarchy.node_ids(level)[np.asarray(gold)[chosen]] == best[chosen]
    answered = level_of > 0
    return {"abstain_below": float(abstain_below),
            "answered_at_level": {str(level): float(np.mean(level_of == level)) if len(gold) else 0.0
                                  for level in range(1, hierarchy.depth + 1)},
            "answered_at_no_level": float(np.mean(~answered)) if len(gold) else 0.0,
            "answers_right": float(right[answered].mean()) if answered.any() else 0.0}


def _multi_label_intervals(gold: np.ndarray, predicted: np.ndarray, rounds: int = 1000, level: float = 0.95,
                           seed: int = 0) -> dict:
    """As `bootstrap_intervals`, for micro-F1 and subset accuracy of label sets [texts, labels]."""
    if len(gold) == 0:
        return {}
    hits, guessed, actual = (gold & predicted).sum(axis=1), predicted.sum(axis=1), gold.sum(axis=1)
    exact, rng, parts = (gold == predicted).all(axis=1), np.random.default_rng(seed), []
    for start in range(0, rounds, BOOTSTRAP_CHUNK):
        samples = rng.integers(0, len(gold), size=(min(BOOTSTRAP_CHUNK, rounds - start), len(gold)))
        parts.append((hits[samples].sum(axis=1), guessed[samples].sum(axis=1), actual[samples].sum(axis=1),
                      exact[samples].mean(axis=1)))
    true_positive, guessed, actual, exact = (np.concatenate(part) for part in zip(*parts))
    micro_f1 = np.where(guessed + actual > 0, 2 * true_positive / np.maximum(guessed + actual, 1), 0.0)
    return {"micro_f1": _interval(micro_f1, level), "subset_accuracy": _interval(exact, level)}


def tune_thresholds(gold: np.ndarray, probabilities: np.ndarray, default: float = 0.5,
                    min_positives: int = MIN_TUNING_POSITIVES) -> np.ndarray:
    """Per label, the probability threshold (predict the label when p >= it) that maximises its F1 on these
    texts: halfway between two neighbouring probabilities, so a small shift of the scores does not flip the
    decision at the edge; on a tie, the one nearest `default`. A label with fewer than `min_positives` positive
    texts would get a threshold fitted to one or two of them (of 5,000 labels with one dev text each, test micro-F1
    fell to 0.50 against 0.58 at 0.5): those labels share the one threshold that maximises their micro-F1 together,
    `default` when none of them has a positive text."""
    gold = np.asarray(gold) > 0.5
    positives = gold.sum(axis=0)
    rare = positives < min_positives
    thresholds = np.full(gold.shape[1], default, dtype=np.float64)
    if rare.all() and positives.any():  # the whole arrays: a copy of 20,000 x 20,000 costs gigabytes
        thresholds[:] = _shared_threshold(gold, probabilities, default)
    elif rare.any() and positives[rare].any():
        thresholds[rare] = _shared_threshold(gold[:, rare], probabilities[:, rare], default)
    for label in np.flatnonzero(~rare):
        order = np.argsort(-probabilities[:, label], kind="stable")
        scores, hits = probabilities[order, label].astype(np.float64), gold[order, label]
        cut = np.flatnonzero(np.diff(scores) < 0)  # predicting the first cut+1 texts: only between distinct scores
        cut = np.append(cut, len(scores) - 1)
        true_positive = np.cumsum(hits)[cut]
        f1 = 2 * true_positive / (cut + 1 + positives[label])
        edges = np.append((scores[cut[:-1]] + scores[cut[:-1] + 1]) / 2, scores[-1] / 2)
        best = np.flatnonzero(np.isclose(f1, f1.max(), rtol=0, atol=1e-12))
        thresholds[label] = edges[best[np.argmin(np.abs(edges[best] - default))]]
    return thresholds


def _shared_threshold(gold: np.ndarray, probabilities: np.ndarray, default: float, bins: int = 1000) -> float:
    """The threshold, on a grid of `bins` steps of [0, 1], that maximises the micro-F1 of these labels together
    (by histograms: linear in texts x labels, 20,000 x 20,000 included); on a tie, the one nearest `default`."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    counted = np.histogram(probabilities, edges)[0]
    hits = np.histogram(probabilities[gold], edges)[0]
    predicted, right = np.cumsum(counted[::-1])[::-1], np.cumsum(hits[::-1])[::-1]  # p >= edges[i], per i
    f1 = 2 * right / (predicted + gold.sum())
    best = np.flatnonzero(np.isclose(f1, f1.max(), rtol=0, atol=1e-12))
    return float(edges[best[np.argmin(np.abs(edges[best] - default))]])


def _ratio(part, whole) -> float:
    return float(part / whole) if whole else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@dataclass(frozen=True)
class Answers:
    """Each text's top label and its probability: all that accuracy, the calibration error and the decision need of
    a [texts, labels] probability matrix (a data-parallel evaluation gathers these instead: of 20,000 labels a row of
    probabilities is 80 KB, its answer 12 bytes)."""
    predicted: np.ndarray
    confidence: np.ndarray

    @classmethod
    def of(cls, probabilities: np.ndarray) -> Answers:
        return cls(probabilities.argmax(axis=1), probabilities.max(axis=1))


def _answers(probabilities: np.ndarray | Answers) -> Answers:
    return probabilities if isinstance(probabilities, Answers) else Answers.of(probabilities)


def expected_calibration_error(probabilities: np.ndarray | Answers, gold: np.ndarray, bins: int = 15) -> float:
    """How far the top probability is from being right that often: the texts grouped into `bins` equal-width
    bins of their top probability, |accuracy - mean top probability| per bin, weighted by its share of texts
    (Guo et al., 2017)."""
    answers = _answers(probabilities)
    confidence, right = answers.confidence, answers.predicted == np.asarray(gold)
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


def decision_report(probabilities: np.ndarray | Answers, gold: np.ndarray, abstain_below: float | None,
                    points: int = 20) -> dict:
    """What abstaining below a confidence does on labelled texts: at `abstain_below`, the share answered and their
    accuracy (beside the accuracy on all); and the risk-coverage curve, the accuracy of the answered texts at
    coverages 1/points ... 1 (the most confident first)."""
    answers = _answers(probabilities)
    confidence, right = answers.confidence, answers.predicted == gold
    ranked = right[np.argsort(-confidence, kind="stable")]
    counts = [max(1, int(round(share * len(ranked)))) for share in np.arange(1, points + 1) / points]
    report = {"risk_coverage": [[round(n / len(ranked), 4), float(ranked[:n].mean())] for n in counts]}
    if abstain_below is not None:
        answered = confidence >= abstain_below
        report.update(abstain_below=float(abstain_below), coverage=float(answered.mean()),
                      answered_accuracy=float(right[answered].mean()) if answered.any() else None,
                      accuracy_of_all=float(right.mean()), abstained=int((~answered).sum()))
    return report
