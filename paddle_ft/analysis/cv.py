"""Cross-validation: stratified folds of the labelled rows, and the mean and standard deviation of every
metric over the folds' runs."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from paddle_ft.artifacts.run import Results


def stratified_folds(keys: list[str], folds: int, seed: int) -> list[np.ndarray]:
    """Row indices of each fold: every label (label set, for multi-label rows) dealt round-robin over the folds
    after a seeded shuffle, so each fold has its share of every label, and the folds differ in size by at
    most one row per label."""
    rng = np.random.default_rng([seed, 2])
    by_key = defaultdict(list)
    for i, key in enumerate(keys):
        by_key[key].append(i)
    members = [[] for _ in range(folds)]
    start = 0
    for key in sorted(by_key):
        rows = rng.permutation(by_key[key])
        for offset, row in enumerate(rows):
            members[(start + offset) % folds].append(int(row))
        start += len(rows)  # the next label starts where this one stopped: sizes stay even
    return [np.sort(np.array(m, dtype=np.int64)) for m in members]


def summarise(fold_results: list[Results]) -> dict:
    """{split: {metric: {"mean", "std", "folds": [...]}}} over the folds' results, for every number that
    every fold reports (std is the sample standard deviation, ddof 1)."""
    summary = {}
    for split in ("dev", "test"):
        reports = [getattr(r, split) for r in fold_results if getattr(r, split)]
        if len(reports) != len(fold_results):
            continue
        names = [n for n, v in reports[0].items() if isinstance(v, float) and all(isinstance(r.get(n), float)
                                                                                  for r in reports)]
        summary[split] = {n: {"mean": float(np.mean([r[n] for r in reports])),
                              "std": float(np.std([r[n] for r in reports], ddof=1)) if len(reports) > 1 else 0.0,
                              "folds": [r[n] for r in reports]} for n in names}
    return summary


def markdown(summary: dict) -> str:
    lines = ["| split | metric | mean ± std | folds |", "|---|---|---:|---|"]
    for split, metrics in summary.items():
        for name, m in metrics.items():
            lines.append(f"| {split} | {name} | {m['mean']:.4f} ± {m['std']:.4f} | "
                         + ", ".join(f"{v:.4f}" for v in m["folds"]) + " |")
    return "\n".join(lines) + "\n"
