"""How long the rest of a training run will take, from the work its planned batches hold.

A step's cost follows its padded tokens, and with length-grouped batches those differ by up to 10x between steps: a
pace in seconds per step, taken over the first few dozen, is off by whatever mix of lengths they happened to draw,
and it leaves out the dev evaluations and the final scoring. Every step batch of the run is known before it starts
(the sampler's order is fixed by the seed), so the ETA here is the padded tokens left, times the seconds per padded
token measured so far, plus the evaluations left, which are timed once one has run and, before that, costed as a
forward pass (a third of a training step's work per token)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from paddle_ft.engine.batching import micro_batches
from paddle_ft.log import elapsed

FORWARD_SHARE = 1 / 3  # of a training token's time: forward only, against forward + backward (about 2x forward)
WARM_UP_STEPS = 2  # the first steps allocate memory and pick kernels: left out of the pace


@dataclass
class StepWork:
    """The run's work in padded tokens: of each optimizer step (this rank's micro-batches), of one dev evaluation,
    of the final scoring, and the steps after which dev is evaluated."""

    steps: np.ndarray
    evaluation: float
    final: float
    evaluated_after: frozenset[int]

    @classmethod
    def plan(cls, epoch_batches: list[list[list[int]]], total_steps: int, lengths: np.ndarray, batch_size: int,
             rank: int, world_size: int, dev_lengths: np.ndarray | None, test_lengths: np.ndarray | None,
             every: int) -> StepWork:
        """`epoch_batches`: each epoch's step batches, in the sampler's order; the run stops at `total_steps`."""
        steps, evaluated_after, step = [], set(), 0
        for batches in epoch_batches:
            for index, step_batch in enumerate(batches):
                if step == total_steps:
                    break
                group, _ = micro_batches(step_batch, batch_size, rank, world_size)
                steps.append(sum(int(lengths[part].max()) * len(part) for part in group if part))
                step += 1
                if dev_lengths is not None and ((every and step % every == 0) or index + 1 == len(batches)
                                                or step == total_steps):
                    evaluated_after.add(step)
        evaluation = float(dev_lengths.sum()) / world_size if dev_lengths is not None else 0.0
        # the final scoring: test (dev's report is the best evaluation's, kept)
        final = float(test_lengths.sum()) if test_lengths is not None else 0.0
        return cls(np.asarray(steps, dtype=np.float64), evaluation, final, frozenset(evaluated_after))

    def seconds(self, per_token: float, per_eval_token: float | None = None, done: int = 0) -> float:
        """What the steps after `done` take at `per_token` seconds a padded token, with the evaluations after them
        and the final scoring at `per_eval_token` (default: a forward pass's share of `per_token`)."""
        per_eval_token = per_token * FORWARD_SHARE if per_eval_token is None else per_eval_token
        evaluations = sum(1 for step in self.evaluated_after if step > done)
        return per_token * float(self.steps[done:].sum()) + per_eval_token * (evaluations * self.evaluation
                                                                               + self.final)


class TrainingEta:
    """Feed it each step's and each evaluation's seconds; `describe(done)` gives the elapsed time and the ETA."""

    def __init__(self, work: StepWork, first_step: int = 0):
        self.work, self.first_step = work, first_step
        self.started = time.perf_counter()
        self.step_seconds, self.step_tokens = 0.0, 0.0
        self.eval_seconds, self.eval_tokens = 0.0, 0.0

    def stepped(self, step: int, seconds: float) -> None:
        """Optimizer step `step` (1-based) took `seconds`."""
        if step > self.first_step + WARM_UP_STEPS and step <= len(self.work.steps):
            self.step_seconds += seconds
            self.step_tokens += self.work.steps[step - 1]

    def evaluated(self, seconds: float) -> None:
        """A dev evaluation (and the checkpoint saved with it) took `seconds`."""
        self.eval_seconds += seconds
        self.eval_tokens += self.work.evaluation

    def seconds_left(self, done: int) -> float | None:
        """None until a step past the warm-up has been timed."""
        if not self.step_tokens:
            return None
        return self.work.seconds(self.step_seconds / self.step_tokens,
                                 self.eval_seconds / self.eval_tokens if self.eval_tokens else None, done)

    def describe(self, done: int) -> str:
        left = self.seconds_left(done)
        eta = "measuring" if left is None else elapsed(left)
        return f"elapsed {elapsed(time.perf_counter() - self.started)}, ETA {eta} (evaluations included)"
