"""Which unlabelled texts to label next (active learning): a ranking of a pool by what a label would teach the model.

    uncertainty  the highest entropy of the calibrated probabilities first (a multi-label model: the mean of its
                 labels' binary entropies)
    margin       the smallest gap between the two most probable labels first (multi-label: the smallest distance
                 of any label's probability to its threshold)
    diverse      among the 4 x budget most uncertain, a greedy k-center cover of the embedding space: each pick the
                 text farthest from everything labelled or picked so far, so a batch does not spend its labels on
                 near-copies (Sener & Savarese 2018, restricted to uncertain texts)
    mixed        half the budget the most uncertain, half a seeded random draw of the rest, alternating: the
                 uncertain half teaches the boundary, the random half keeps the labelled set a sample of the pool
                 (uncertainty alone fills it with ambiguous texts, which a fine-tuned encoder can fail to learn
                 from at all: docs/labelling.md's measurements)
    random       a seeded shuffle: the baseline the others are measured against

Every strategy is a pure function of the scores (and the seed), so a selection repeats exactly."""
from __future__ import annotations

import numpy as np

from paddle_ft.errors import UserError

STRATEGIES = ("uncertainty", "margin", "diverse", "mixed", "random")
DIVERSE_CANDIDATES = 4  # diverse: k-center over this many times the budget of the most uncertain texts


def select(strategy: str, probabilities: np.ndarray, budget: int, thresholds: tuple[float, ...] | None = None,
           vectors: np.ndarray | None = None, labelled_vectors: np.ndarray | None = None, seed: int = 0
           ) -> tuple[np.ndarray, np.ndarray]:
    """(the chosen rows of the pool, best first [budget], each one's uncertainty [budget]): `probabilities`
    [pool, classes]; `thresholds` for a multi-label model; `vectors` [pool, hidden] unit rows for diverse, with
    the texts already labelled (`labelled_vectors`) counted as covered."""
    if strategy not in STRATEGIES:
        raise UserError(f"--strategy {strategy}: choose one of {', '.join(STRATEGIES)}")
    budget = min(budget, len(probabilities))
    uncertain = uncertainty(probabilities, thresholds)
    if strategy == "random":
        order = np.random.default_rng(seed).permutation(len(probabilities))[:budget]
    elif strategy == "uncertainty":
        order = _descending(uncertain)[:budget]
    elif strategy == "margin":
        order = _descending(-margin(probabilities, thresholds))[:budget]
    elif strategy == "mixed":
        order = half_uncertain_half_random(uncertain, budget, seed)
    else:
        if vectors is None:
            raise ValueError("diverse needs the pool's vectors")
        candidates = _descending(uncertain)[:DIVERSE_CANDIDATES * budget]
        order = candidates[k_center(vectors[candidates], budget, labelled_vectors)]
    return order, uncertain[order]


def uncertainty(probabilities: np.ndarray, thresholds: tuple[float, ...] | None = None) -> np.ndarray:
    """[pool]: the entropy of each text's probabilities, in nats (multi-label: mean binary entropy per label)."""
    p = np.clip(probabilities.astype(np.float64), 1e-12, 1.0)
    if thresholds is None:
        return -(p * np.log(p)).sum(axis=1)
    q = np.clip(1.0 - probabilities.astype(np.float64), 1e-12, 1.0)
    return -(p * np.log(p) + q * np.log(q)).mean(axis=1)


def margin(probabilities: np.ndarray, thresholds: tuple[float, ...] | None = None) -> np.ndarray:
    """[pool]: how far each text is from another answer: top-1 minus top-2 probability (multi-label: the smallest
    distance of a label's probability to its threshold)."""
    if thresholds is not None:
        return np.abs(probabilities - np.asarray(thresholds)).min(axis=1)
    top_two = np.sort(probabilities, axis=1)[:, -2:]
    return top_two[:, 1] - top_two[:, 0]


def half_uncertain_half_random(uncertain: np.ndarray, budget: int, seed: int) -> np.ndarray:
    """`budget` rows: the ceil(budget / 2) most uncertain and a seeded random draw of the others, interleaved
    (uncertain first), so a batch labelled only in part still has both kinds."""
    ranked = _descending(uncertain)
    top = ranked[:(budget + 1) // 2]
    rest = np.random.default_rng(seed).permutation(ranked[len(top):])[:budget - len(top)]
    order = np.empty(len(top) + len(rest), dtype=np.int64)
    order[0:2 * len(rest):2], order[1:2 * len(rest):2] = top[:len(rest)], rest
    order[2 * len(rest):] = top[len(rest):]
    return order


def k_center(vectors: np.ndarray, k: int, covered: np.ndarray | None = None) -> np.ndarray:
    """Greedy k-center: `k` rows of `vectors` (unit rows), each the farthest (cosine distance) from the rows in
    `covered` and those picked before it; ties go to the earlier row. With nothing covered the first pick is row
    0 (the most uncertain candidate)."""
    k = min(k, len(vectors))
    nearest = np.full(len(vectors), np.inf)
    if covered is not None and len(covered):
        for start in range(0, len(covered), 1024):  # [pool, 1024] at a time: bounded memory for a large labelled set
            nearest = np.minimum(nearest, (1.0 - vectors @ covered[start:start + 1024].T).min(axis=1))
    picked = []
    for _ in range(k):
        row = int(np.argmax(nearest)) if np.isfinite(nearest).any() else 0
        picked.append(row)
        nearest = np.minimum(nearest, 1.0 - vectors @ vectors[row])
        nearest[picked] = -np.inf
    return np.asarray(picked, dtype=np.int64)


def _descending(values: np.ndarray) -> np.ndarray:
    """Row indices by `values`, highest first; equal values keep row order (a stable sort)."""
    return np.argsort(-values, kind="stable")
