"""How long a recipe will train on this machine, and the memory it takes, measured rather than guessed: a few
optimizer steps of the recipe's own model run here (what `init --backbone` does before it hands the recipe over), and
their seconds per padded token applied to every step batch the whole run will draw (engine/eta.py's costing), its
dev evaluations and final scoring included. The timed steps draw batches of mixed lengths (no length grouping), each
padded to its longest, so their peak memory is near that of the run's longest batches.

With a budget in minutes it also says how many epochs fit, or what part of one (`Forecast.fitted`)."""
from __future__ import annotations

import contextlib
import io
import math
import resource
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.artifacts.run import RunFiles
from paddle_ft.config import load_config
from paddle_ft.engine.amp import PRECISION_LINE
from paddle_ft.engine.eta import FORWARD_SHARE, WARM_UP_STEPS
from paddle_ft.engine.trainer import planned_work, schedule
from paddle_ft.log import elapsed
from paddle_ft.runtime import cpu_model, cpu_speed_flags, usable_cores
from paddle_ft.text import Truncation
from paddle_ft.workflows import training
from paddle_ft.workflows.build import build_splits, build_tokenizer, read_dataset, resolve_backbone

STEPS = 8  # timed: WARM_UP_STEPS of them are left out of the pace
MIN_STEPS = 50  # a budget that allows fewer steps than this is refused: nothing would be learnt


@dataclass(frozen=True)
class Forecast:
    """A recipe's run on this machine, as timed."""

    train_rows: int
    epochs: int
    steps_per_epoch: int
    epoch_seconds: float
    """The training steps of one epoch."""
    evaluation_seconds: float
    """One dev evaluation (0 without dev)."""
    evaluations_per_epoch: float
    final_seconds: float
    """Scoring the best model on test at the end."""
    peak_bytes: int
    machine: str
    precision: str = ""
    """The timed run's precision line (train.amp.enabled auto's choice on a CPU), "" where it said none."""

    def total_seconds(self, epochs: float | None = None) -> float:
        epochs = self.epochs if epochs is None else epochs
        return epochs * (self.epoch_seconds + self.evaluations_per_epoch * self.evaluation_seconds) + \
            self.final_seconds

    def describe(self) -> str:
        return (f"on this machine ({self.machine}): about {elapsed(self.epoch_seconds)} an epoch of "
                f"{self.train_rows:,} rows, {elapsed(self.total_seconds())} for the recipe's {self.epochs} "
                f"epoch(s) with their evaluations; peak memory about {self.peak_bytes / 2**30:.1f} GB "
                f"({STEPS} training steps timed here; loading the model adds seconds)"
                + (f"; {self.precision}" if self.precision else ""))

    def fitted(self, budget_seconds: float) -> dict[str, int] | None:
        """The settings that make the run fit `budget_seconds`: fewer epochs, or max_steps within one; None when it
        already fits. Raises ValueError when not even MIN_STEPS steps fit."""
        if self.total_seconds() <= budget_seconds:
            return None
        epochs = math.floor((budget_seconds - self.final_seconds)
                            / (self.epoch_seconds + self.evaluations_per_epoch * self.evaluation_seconds))
        if epochs >= 1:
            return {"train.epochs": epochs}
        step_seconds = self.epoch_seconds / self.steps_per_epoch
        steps = math.floor((budget_seconds - self.final_seconds - self.evaluation_seconds) / step_seconds)
        if steps < MIN_STEPS:
            raise ValueError(f"{MIN_STEPS} training steps take about {elapsed(MIN_STEPS * step_seconds)} here, "
                             f"more than the budget of {elapsed(budget_seconds)} leaves")
        return {"train.max_steps": steps}


def forecast(config_path: str, overrides: Sequence[str] = ()) -> Forecast:
    """Times STEPS training steps of the config's recipe (in a temporary folder, its output kept back) and costs the
    whole run from them."""
    config = load_config(config_path, list(overrides))
    # the timed run's lines (and the data's, read again below) are not the user's: init says what they came to
    with tempfile.TemporaryDirectory(prefix="paddle_ft-forecast-") as scratch, \
            contextlib.redirect_stdout(io.StringIO()) as said:
        run = Path(scratch) / "run"
        training.train(config_path, [*overrides, f"output_dir={run}", f"train.max_steps={STEPS}",
                                     "train.runtime.log_every=1", "data.dev=null", "data.test=null",
                                     "data.group_by_length=false",
                                     "train.checkpoints.keep=0", "train.runtime.write_report=false",
                                     "train.resume=null"])
        events = RunFiles(run).read_events("train")
        dataset = read_dataset(config.data, config.task)
        splits = build_splits(dataset, build_tokenizer(resolve_backbone(config.model)), config.data.max_length,
                              config.data.cache_dir, Truncation.of(config.data))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux counts it in KiB
    step_examples = config.train.batch_size * config.train.accumulate_steps
    timed = [e.values for e in events if e.step > WARM_UP_STEPS]
    seconds = sum(step_examples / v["samples_per_s"] for v in timed)
    per_token = seconds / sum(v["padded_tokens_per_s"] * step_examples / v["samples_per_s"] for v in timed)
    seen, engine_config = training.as_the_engine_sees(splits, config)
    plan, sampler = schedule(seen, engine_config)
    work = planned_work(plan, sampler, seen, engine_config)
    machine = f"{cpu_model()}, {usable_cores()} cores, {' '.join(cpu_speed_flags()) or 'no AVX2'}"
    return Forecast(len(splits.train), plan.epochs, plan.steps_per_epoch,
                    per_token * float(work.steps.sum()) / plan.epochs, per_token * FORWARD_SHARE * work.evaluation,
                    len(work.evaluated_after) / plan.epochs, per_token * FORWARD_SHARE * work.final, peak, machine,
                    next((line for line in said.getvalue().splitlines() if line.startswith(PRECISION_LINE)), ""))


def seconds_per_run(config_path: str, overrides: Sequence[str], train_rows: int | None = None) -> float:
    """What one run of the config takes here (`forecast`), scaled to `train_rows` training rows where each run trains
    on another number (a cross-validation fold: the pool less the fold)."""
    plan = forecast(config_path, overrides)
    return plan.total_seconds() * (1 if train_rows is None else train_rows / max(plan.train_rows, 1))
