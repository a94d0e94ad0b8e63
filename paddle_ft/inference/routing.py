"""`backend: auto`: which engine runs a call, by its size, from a crossover measured on the export at load.

Why per call: on CPU at fp32, ONNX Runtime wins small calls (Paddle Inference pays ~70 us of fixed cost per oneDNN
primitive, see docs/performance.md) while Paddle Inference's oneDNN matmuls can win large batches; where the two
cross depends on the model, the thread count and the CPU (two machines of one kind disagreed at batch 32). So the
`Predictor` times both engines on its own export at a few call sizes when it loads (which also warms them) and
fits one crossover to those times: one engine below a call size, the other from it (or one engine throughout),
whichever split loses the least time against the fastest engine at every measured size. One crossover, because
fixed costs per call favour one engine and throughput the other; fitting it rather than taking each size's winner
keeps one noisy measurement (a shared machine) from sending a single size to the slower engine.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

MEASURED_BATCHES = (1, 4, 16, 64)  # a crossover placed within a factor of 4 costs little: the
# engines' times are close near it
MEASURED_WIDTH = 64  # tokens per text in the measured calls (the model's max_length where shorter)
# each engine's time at a size is its best of REPEATS calls, the engines taking turns, or of more (up to
# MAX_REPEATS) while the size has taken less than SIZE_BUDGET_S: a shared machine's bursts spoil single calls, and
# small models can afford many
REPEATS, MAX_REPEATS, SIZE_BUDGET_S = 3, 20, 0.04
STOP_AFTER_S = 0.25  # sizes beyond the first whose call takes this long are not measured (a full-size model's
# load would take minutes): the larger calls go to the largest measured size's engine

Engine = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Route:
    """The engine for a call of `tokens` = batch x padded width: the crossover's engine at the nearest measured
    size."""

    points: tuple[tuple[int, str], ...]
    """(tokens per call, the engine the fitted crossover runs there), by tokens."""
    seconds: dict[int, dict[str, float]]
    """The measured time of a call of each size on each engine."""

    def engine_for(self, batch: int, width: int) -> str:
        tokens = max(1, batch * width)
        return min(self.points, key=lambda point: abs(math.log(point[0] / tokens)))[1]

    def describe(self) -> str:
        """e.g. "onnxruntime below 1024 tokens a call, paddle from 1024": where each engine runs."""
        first, (_, last) = self.points[0][1], self.points[-1]
        if first == last:
            return f"{first} at every size"
        switch = next(tokens for tokens, engine in self.points if engine == last)
        return f"{first} below {switch} tokens a call, {last} from {switch}"

    def as_dict(self) -> dict:
        return {"points": [{"tokens": tokens, "engine": engine, "seconds": self.seconds[tokens]}
                           for tokens, engine in self.points]}


def single_route(engine: str) -> Route:
    """Every call on one engine (the backend was named, or only one can run the export)."""
    return Route(((1, engine),), {1: {}})


def measure_route(engines: dict[str, Engine], width: int, token_id: int) -> Route:
    """Time every engine at MEASURED_BATCHES x `width` tokens (best of REPEATS or more, taking turns so that a
    noisy moment hits all), stopping after the first size where a call takes STOP_AFTER_S."""
    seconds = {}
    for batch in MEASURED_BATCHES:
        ids = np.full((batch, width), token_id, dtype=np.int64)
        types = np.zeros_like(ids)
        for run in engines.values():
            run(ids, types)  # the first call of a shape builds kernels: not measured
        best, spent, rounds = {name: math.inf for name in engines}, 0.0, 0
        while rounds < REPEATS or (rounds < MAX_REPEATS and spent < SIZE_BUDGET_S):
            for name, run in engines.items():
                started = time.perf_counter()
                run(ids, types)
                took = time.perf_counter() - started
                best[name], spent = min(best[name], took), spent + took
            rounds += 1
        seconds[batch * width] = best
        if max(best.values()) >= STOP_AFTER_S:
            break
    sizes = sorted(seconds)
    rounded = {tokens: {name: round(value, 6) for name, value in seconds[tokens].items()} for tokens in sizes}
    return Route(tuple(zip(sizes, fit_crossover([seconds[tokens] for tokens in sizes]))), rounded)


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
