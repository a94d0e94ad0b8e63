"""Out-of-fold probabilities from a linear probe: a logistic regression on fixed vectors (a frozen encoder's
embeddings of the rows), fitted once per fold on the other folds' rows. `label-issues` takes them instead of k
fine-tunings where the encoder is large: one forward pass over the rows and seconds of fitting, against k training
runs (at multilingual-e5-small's size, hours on 2 cores)."""
from __future__ import annotations

import numpy as np

# the vectors are unit length, so their coordinates are small: a weak penalty (scikit-learn's default is C=1)
INVERSE_PENALTY = 10.0


def out_of_fold_probabilities(vectors: np.ndarray, gold: np.ndarray, folds: list[np.ndarray],
                              multi_label: bool) -> np.ndarray:
    """[rows, labels]: each row's probabilities from the probe fitted without its fold. `gold` is [rows] label ids,
    or for multi-label [rows, labels] 0/1 (a sigmoid per label, each its own probe)."""
    labels = gold.shape[1] if multi_label else int(gold.max()) + 1
    probabilities = np.zeros((len(vectors), labels))
    everything = np.arange(len(vectors))
    for held_out in folds:
        fitted_on = np.setdiff1d(everything, held_out)
        if multi_label:
            for label in range(labels):
                probabilities[held_out, label] = _fit(vectors[fitted_on], gold[fitted_on, label],
                                                      vectors[held_out], 2)[:, 1]
        else:
            probabilities[held_out] = _fit(vectors[fitted_on], gold[fitted_on], vectors[held_out], labels)
    return probabilities


def _fit(x: np.ndarray, y: np.ndarray, scored: np.ndarray, labels: int) -> np.ndarray:
    """[scored, labels] probabilities of a logistic regression on (x, y); a label absent from y gets 0, and where y
    holds one label only, that label gets 1 (no regression has a second class to learn)."""
    from sklearn.linear_model import LogisticRegression

    present = np.unique(y)
    out = np.zeros((len(scored), labels))
    if len(present) == 1:
        out[:, int(present[0])] = 1.0
        return out
    classifier = LogisticRegression(C=INVERSE_PENALTY, max_iter=2000)
    classifier.fit(x, y)
    out[:, classifier.classes_.astype(int)] = classifier.predict_proba(scored)
    return out
