"""The derived numbers of a run, computed in one place and logged once."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from paddle_ft.engine.batching import batches_per_epoch


@dataclass(frozen=True)
class RunPlan:
    train_examples: int
    batch_size: int
    """Examples per micro-batch on one device."""
    accumulate_steps: int
    world_size: int
    effective_batch_size: int
    """Examples per optimizer step across all devices."""
    micro_batches_per_epoch: int
    steps_per_epoch: int
    """Optimizer steps per epoch (a last, partial accumulation group still steps, unless it has fewer examples
    than devices)."""
    epochs: int
    """Epochs started; the last may stop early when `total_steps` comes from max_steps."""
    total_steps: int
    warmup_steps: int

    def describe(self) -> str:
        return (f"{self.train_examples} training examples, micro-batch {self.batch_size} x "
                f"{self.accumulate_steps} accumulation x {self.world_size} device(s) = "
                f"{self.effective_batch_size} examples per step; {self.steps_per_epoch} steps per epoch, "
                f"{self.total_steps} steps over {self.epochs} epoch(s), {self.warmup_steps} warmup steps")

    def as_dict(self) -> dict:
        return asdict(self)


def plan_run(train_examples: int, batch_size: int, accumulate_steps: int, epochs: int,
             max_steps: int | None, warmup: float, world_size: int = 1) -> RunPlan:
    # the step batches TrainBatchSampler(min_batch=world_size) cuts, and the pieces of one micro-batch per rank
    # micro_batches keeps of them (the partial step batch may end in a piece smaller than the ranks: dropped)
    step_examples = batch_size * accumulate_steps * world_size
    steps_per_epoch = batches_per_epoch(train_examples, step_examples, world_size)
    full_steps, rest = divmod(train_examples, step_examples)
    micro_batches = full_steps * accumulate_steps + (
        batches_per_epoch(rest, batch_size * world_size, world_size) if rest >= world_size else 0)
    if max_steps is not None:
        total_steps = max_steps
        epochs = -(-max_steps // steps_per_epoch)
    else:
        total_steps = steps_per_epoch * epochs
    return RunPlan(train_examples, batch_size, accumulate_steps, world_size,
                   batch_size * accumulate_steps * world_size, micro_batches, steps_per_epoch, epochs,
                   total_steps, warmup_steps(warmup, total_steps))


def warmup_steps(warmup: float, total_steps: int) -> int:
    """`warmup` below 1 is a proportion of the optimizer steps; from 1 up, a step count."""
    if warmup < 1:
        return int(warmup * total_steps)
    return min(int(warmup), total_steps)
