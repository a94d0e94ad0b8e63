"""How far live traffic has moved from the data a model was trained on: the population stability index (PSI) of
the predicted labels against the training labels' shares, and of text lengths against the training texts' length
bins. The training side (`reference`) is computed when training ends, kept in best/'s manifest and carried into the
export's; the server compares a sliding window of its traffic with it (serve/monitor.py).

PSI = sum over bins of (live - reference) * ln(live / reference), each share floored at 1e-4. Read as the usual
rule of thumb: below 0.1 no shift, 0.1 to 0.25 a shift worth watching, above 0.25 a shift that needs action."""
from __future__ import annotations

import numpy as np

PSI_WATCH, PSI_ALERT = 0.1, 0.25
LENGTH_BINS = 10
_FLOOR = 1e-4


def psi(live: np.ndarray, reference: np.ndarray) -> float:
    """The population stability index of two share vectors over the same bins."""
    live = np.maximum(np.asarray(live, dtype=np.float64), _FLOOR)
    reference = np.maximum(np.asarray(reference, dtype=np.float64), _FLOOR)
    live, reference = live / live.sum(), reference / reference.sum()
    return float(np.sum((live - reference) * np.log(live / reference)))


def reference(labels: list[str], label_names: tuple[str, ...], lengths: list[int], unknown_token_share: float) -> dict:
    """The training side of drift: each label's share of the training rows, the length bins (edges at the deciles of
    the training texts' lengths in characters, and each bin's share), and the share of [UNK] tokens."""
    counts = np.array([labels.count(name) for name in label_names], dtype=np.float64)
    edges = np.unique(np.quantile(np.asarray(lengths), np.linspace(0, 1, LENGTH_BINS + 1)[1:-1]))
    return {"labels": list(label_names), "label_shares": (counts / max(counts.sum(), 1)).tolist(),
            "length_edges": edges.tolist(), "length_shares": length_shares(lengths, edges.tolist()).tolist(),
            "unknown_token_share": unknown_token_share}


def text_length(text: str, text_pair: str | None = None) -> int:
    """A text's length in characters, as drift measures it on both sides (a pair: both texts and a separator)."""
    return len(text) + (len(text_pair) + 1 if text_pair is not None else 0)


def length_shares(lengths, edges: list[float]) -> np.ndarray:
    """The share of `lengths` in each bin the `edges` cut (len(edges) + 1 bins)."""
    bins = np.searchsorted(np.asarray(edges), np.asarray(lengths), side="right")
    return np.bincount(bins, minlength=len(edges) + 1) / max(len(lengths), 1)
