"""A recipe's runs, one a seed, summed up as the tools that train over seeds report them (tools/e5_bench.py,
tools/precision_bench.py): accuracy as mean and range (a seed's luck shows as the range, not hidden in a best-of),
speeds as medians, and every run's own figures kept."""
from __future__ import annotations

import statistics

ACCURACIES = ("test_accuracy", "dev_accuracy")


def over_seeds(runs: dict[int, dict], medians: tuple[str, ...] = ("samples_per_s",),
               largest: tuple[str, ...] = ()) -> dict:
    """`runs` (seed -> a run's figures): each of ACCURACIES as mean and [min, max], each of `medians` as the median
    run's, each of `largest` as the largest (a peak memory), and under "runs" each seed's accuracies and medians."""
    def of(key: str) -> list[float]:
        return [run[key] for run in runs.values()]

    summary: dict = {"seeds": list(runs)}
    for key in ACCURACIES:
        summary[key], summary[f"{key}_range"] = statistics.mean(of(key)), [min(of(key)), max(of(key))]
    summary.update({key: statistics.median(of(key)) for key in medians})
    summary.update({key: max(of(key)) for key in largest})
    summary["runs"] = {seed: {key: run[key] for key in (*ACCURACIES, *medians)} for seed, run in runs.items()}
    return summary
