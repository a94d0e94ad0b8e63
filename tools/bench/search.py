"""The largest batch that trains, found by probing: one search for the bench's AMP table and gpu-check."""
from __future__ import annotations

import math
import re
import time
from typing import Callable, NamedTuple

# what Paddle prints when a CUDA allocation fails (ResourceExhaustedError "Out of memory error on GPU ...")
_OUT_OF_MEMORY = re.compile(r"out of memory|ResourceExhausted|cudaErrorMemoryAllocation|CUDA error\(2\)", re.I)


def is_out_of_memory(log: str) -> bool:
    return bool(_OUT_OF_MEMORY.search(log))


class ProbeFailed(RuntimeError):
    """A probe failed for another reason than memory: the search ends there and says why."""


class Search(NamedTuple):
    fit: int
    """The largest batch that trained (0: none did)."""
    unfit: int | None
    """The smallest that ran out of memory (None: none did)."""
    failure: str | None = None
    """Why a probe failed otherwise (ProbeFailed), which ended the search."""


def largest_batch(fits: Callable[[int], bool], start: int, budget_seconds: float = math.inf,
                  clock: Callable[[], float] = time.monotonic, cap: int = 8192) -> Search:
    """Doubling from `start` until a batch does not fit (`fits` says; it raises ProbeFailed for anything but memory),
    then bisection between the two, until the budget is spent (the bracket says how close it got). No probe beyond
    `cap`: a batch larger than the data would train on all of it and "fit" without ever holding the batch."""
    deadline = clock() + budget_seconds
    fit, unfit = 0, None
    while clock() < deadline:
        if unfit is None:
            trial = max(start, 2 * fit)
            if trial > cap:
                break
        elif unfit - fit <= 1:
            break
        else:
            trial = (fit + unfit) // 2
        try:
            if fits(trial):
                fit = trial
            else:
                unfit = trial
        except ProbeFailed as exc:
            return Search(fit, unfit, str(exc))
    return Search(fit, unfit)
