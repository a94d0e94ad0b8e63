"""`backend: auto`: which engine runs a call, by its batch size and width, from crossovers measured on the export
at load.

Why per call: on CPU at fp32, ONNX Runtime wins small calls (Paddle Inference pays ~70 us of fixed cost per oneDNN
primitive, see docs/performance.md) while Paddle Inference can win large batches of long texts (ONNX Runtime's
attention slows more with the length); where they cross depends on the model, the thread count and the CPU (two
machines of one kind disagreed at batch 32). So the `Predictor` times the engines on its own export when it loads
(which also warms them), at a few batch sizes for a short and a long width (a lone text is short; a batch is padded
to its longest text), and fits one crossover per width: one engine below a batch size, another from it (or one
throughout), whichever split loses the least time against the fastest engine at every measured size. One crossover,
because fixed costs per call favour one engine and throughput another; fitting it rather than taking each size's
winner keeps one noisy measurement (a shared machine) from sending a single size to the slower engine.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

MEASURED_BATCHES = (1, 4, 16, 64)  # a crossover placed within a factor of 4 costs little: the engines' times are
# close near it
# tokens per text in the measured calls (the model's max_length where shorter). One width was not enough: measured
# at 64 tokens ONNX Runtime looked the faster at batch 16, and it was 0.9x Paddle Inference on the bench's batches of
# 8 texts padded to ~120; measured at 128 Paddle Inference looked the faster at batch 1, and it was 0.75x ONNX
# Runtime on single texts of ~40 tokens
MEASURED_WIDTHS = (32, 128)
# each engine's time at a size is its best call over REPEATS rounds, or more (up to MAX_REPEATS) while the size has
# taken less than SIZE_BUDGET_S: a shared machine's bursts spoil single calls, and small models can afford many. In a
# round each engine makes BURST calls in a row and only the last counts: the first call after another engine's
# pays for that engine's threads still spinning (Paddle's OpenMP keeps them busy for a while), which in steady use
# (one engine for a run of similar calls) it would not
REPEATS, MAX_REPEATS, SIZE_BUDGET_S, BURST = 3, 20, 0.04, 2
STOP_AFTER_S = 0.25  # batch sizes beyond the first whose call takes this long are not measured (a full-size
# model's load would take minutes): larger batches go to the largest measured size's engine

Engine = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Route:
    """The engine for a call of `batch` texts padded to `width` tokens: at the measured width nearest to it, the
    crossover's engine at the nearest measured batch size (both on a log scale)."""

    points: tuple[tuple[int, int, str], ...]
    """(width, batch size, the engine the width's crossover runs there), by width, then batch size."""
    seconds: dict[tuple[int, int], dict[str, float]]
    """The measured time of a call of each (width, batch size) on each engine."""

    def engine_for(self, batch: int, width: int) -> str:
        width = _nearest({w for w, _, _ in self.points}, width)
        row = {b: engine for w, b, engine in self.points if w == width}
        return row[_nearest(row, batch)]

    def describe(self) -> str:
        """e.g. "32 tokens: onnxruntime at every batch size; 128 tokens: onnxruntime below batch 16, paddle from 16"."""
        parts = []
        for width in sorted({w for w, _, _ in self.points}):
            row = [(b, engine) for w, b, engine in self.points if w == width]
            first, last = row[0][1], row[-1][1]
            switch = next(b for b, engine in row if engine == last)
            parts.append(f"{width} tokens: " + (f"{first} at every batch size" if first == last else
                                                f"{first} below batch {switch}, {last} from {switch}"))
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {"points": [{"width": w, "batch": b, "engine": engine, "seconds": self.seconds.get((w, b), {})}
                           for w, b, engine in self.points]}


def _nearest(values, target: int) -> int:
    return min(sorted(values), key=lambda value: abs(math.log(value / max(1, target))))


def single_route(engine: str) -> Route:
    """Every call on one engine (the backend was named, or only one can run the export)."""
    return Route(((1, 1, engine),), {})


def measure_route(engines: dict[str, Engine], widths: tuple[int, ...], token_id: int) -> Route:
    """Time every engine at MEASURED_BATCHES x each of `widths` tokens (best of REPEATS rounds or more, the engines
    taking turns so that a noisy moment hits all), stopping a width after the first batch size whose call takes STOP_AFTER_S, and
    fit each width's crossover."""
    points, seconds = [], {}
    for width in sorted(set(widths)):
        row = {}
        for batch in MEASURED_BATCHES:
            row[batch] = _best_times(engines, np.full((batch, width), token_id, dtype=np.int64))
            seconds[width, batch] = {name: round(value, 6) for name, value in row[batch].items()}
            if max(row[batch].values()) >= STOP_AFTER_S:
                break
        points += [(width, batch, engine) for batch, engine in zip(row, fit_crossover(list(row.values())))]
    return Route(tuple(points), seconds)


def _best_times(engines: dict[str, Engine], ids: np.ndarray) -> dict[str, float]:
    types = np.zeros_like(ids)
    for run in engines.values():
        run(ids, types)  # the first call of a shape builds kernels: not measured
    best, spent, rounds = {name: math.inf for name in engines}, 0.0, 0
    while rounds < REPEATS or (rounds < MAX_REPEATS and spent < SIZE_BUDGET_S):
        for name, run in engines.items():
            for _ in range(BURST):
                started = time.perf_counter()
                run(ids, types)
                took = time.perf_counter() - started
                spent += took
            best[name] = min(best[name], took)
        rounds += 1
    return best


def fit_crossover(times: list[dict[str, float]]) -> list[str]:
    """The engine for each measured size (ascending), switching at most once: of every (engine below, engine from,
    where) the one whose summed time relative to the fastest at each size is least (ties: the first found, one engine
    throughout before a switch)."""
    names = list(times[0])
    best_cost, best_choice = math.inf, None
    for below in names:
        for above in names:
            for split in range(len(times) + 1):
                choice = [below] * split + [above] * (len(times) - split)
                cost = sum(row[name] / min(row.values()) for row, name in zip(times, choice))
                if cost < best_cost - 1e-9:
                    best_cost, best_choice = cost, choice
    return best_choice
