"""Which labelled rows are probably mislabelled: confident learning (Northcutt, Jiang and Chuang, JAIR 2021) over
out-of-fold probabilities, through cleanlab's `find_label_issues`, the maintained, tested implementation of it (its
per-class thresholds and confident joint are the method; writing them again would be the same code less tested).
The rows come back ranked by self-confidence (the model's probability of the given label, lowest first), each with
the label the model suggests instead."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paddle_ft.errors import UserError

# how each row gets a model that did not train on it (workflows.label_issues says what each means)
METHODS = ("auto", "embeddings", "fine-tune")

MULTI_LABEL_CUT = 0.5
"""A multi-label row's suggested set: the labels whose out-of-fold probability reaches this."""


@dataclass(frozen=True)
class LabelIssue:
    row: int
    """Position among the rows scored."""
    given: tuple[str, ...]
    suggested: tuple[str, ...]
    confidence: float
    """The model's probability of its suggestion (a multi-label set: of its least probable member; of the most
    probable label when it suggests none)."""
    given_probability: float
    """Self-confidence: the model's probability of the given label (a set: of every label being present or absent
    as the row says, each judged on its own)."""


def find_label_issues(gold, probabilities: np.ndarray, label_names: tuple[str, ...],
                      multi_label: bool = False) -> list[LabelIssue]:
    """The probable label issues among rows with labels `gold` (class ids; multi-label: 0/1 rows [texts, labels])
    and out-of-fold `probabilities` [texts, labels] (softmax; multi-label: sigmoid), most probable issue first."""
    try:
        from cleanlab.filter import find_label_issues as confident_learning
    except ImportError:
        raise UserError("label-issues needs cleanlab: pip install 'paddle_ft[labels]' (or pip install cleanlab)") \
            from None
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if multi_label:
        gold = np.asarray(gold) > 0.5
        given = [list(np.flatnonzero(row)) for row in gold]
        ranked = confident_learning(given, probabilities, multi_label=True, return_indices_ranked_by="self_confidence",
                                    n_jobs=1)
        return [_multi_label_issue(int(i), gold[i], probabilities[i], label_names) for i in ranked]
    gold = np.asarray(gold, dtype=np.int64)
    ranked = confident_learning(gold, probabilities, return_indices_ranked_by="self_confidence", n_jobs=1)
    return [LabelIssue(int(i), (label_names[gold[i]],), (label_names[int(probabilities[i].argmax())],),
                       float(probabilities[i].max()), float(probabilities[i, gold[i]])) for i in ranked]


def _multi_label_issue(row: int, gold: np.ndarray, probabilities: np.ndarray, names: tuple[str, ...]) -> LabelIssue:
    chosen = probabilities >= MULTI_LABEL_CUT
    confidence = probabilities[chosen].min() if chosen.any() else probabilities.max()
    # the probability that the given set is right, each label judged on its own: given labels present, others absent
    given = float(np.prod(np.where(gold, probabilities, 1 - probabilities)))
    return LabelIssue(row, tuple(n for n, g in zip(names, gold) if g), tuple(n for n, c in zip(names, chosen) if c),
                      float(confidence), given)

