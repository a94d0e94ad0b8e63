"""The training batch order: what makes gradient accumulation and DataParallel equal to one big batch by
construction. One optimizer step's examples are drawn first (`TrainBatchSampler`), then cut into every rank's
micro-batches (`micro_batches`)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from paddle_ft.data.features import cut_batches


class TrainBatchSampler:
    """Shuffled training batches, reshuffled each epoch from (seed, epoch).

    With `group_by_length`, the shuffled order is cut into chunks of `batch_size * chunk_batches`
    examples and each chunk is sorted by length before it is cut into batches; the batch order is then
    shuffled. Every example is still seen exactly once per epoch, but a batch holds texts of similar
    length, so dynamic padding adds few pad tokens.

    Under several ranks each takes a share of every batch, and none may get an empty one: the epoch's partial
    batch is left out when it holds fewer than `min_batch` (the number of ranks) examples, so at most
    min_batch - 1 examples sit out an epoch (other ones in the next, which is shuffled anew).
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, group_by_length: bool = True,
                 chunk_batches: int = 64, min_batch: int = 1):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.group_by_length = group_by_length
        self.chunk_batches = chunk_batches
        self.min_batch = min_batch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return batches_per_epoch(len(self.lengths), self.batch_size, self.min_batch)

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        if not self.group_by_length:
            return iter(self._big_enough(cut_batches(order, self.batch_size)))
        chunk = self.batch_size * self.chunk_batches
        batches = []
        for start in range(0, len(order), chunk):
            part = order[start:start + chunk]
            part = part[np.argsort(-self.lengths[part], kind="stable")]
            batches.extend(cut_batches(part, self.batch_size))
        # left out before the shuffle, which so draws as it always did when no batch is left out
        batches = self._big_enough(batches)
        return iter([batches[i] for i in rng.permutation(len(batches))])

    def _big_enough(self, batches: list[list[int]]) -> list[list[int]]:
        return [batch for batch in batches if len(batch) >= self.min_batch]


def batches_per_epoch(examples: int, batch_size: int, min_batch: int = 1) -> int:
    """How many batches TrainBatchSampler cuts an epoch into: the full ones, and the partial one if it holds at
    least `min_batch` examples."""
    full, rest = divmod(examples, batch_size)
    return full + (rest >= max(min_batch, 1))


def micro_batches(step_batch: list[int], batch_size: int, rank: int = 0,
                  world_size: int = 1) -> tuple[list[list[int]], int]:
    """This rank's micro-batches of one optimizer step's examples.

    The step batch is cut into pieces of `batch_size * world_size` (one per accumulation micro-step)
    and each rank takes every world_size-th example of a piece, so lengths stay balanced. A piece
    with fewer examples than ranks (only possible in the epoch's partial step batch) is dropped, so that
    no rank gets an empty batch; TrainBatchSampler(min_batch=world_size) makes no step batch that would
    be left with no piece. Returns (this rank's micro-batches, examples used by all ranks).
    """
    width = batch_size * world_size
    pieces = [step_batch[i:i + width] for i in range(0, len(step_batch), width)]
    kept = [piece for piece in pieces if len(piece) >= world_size]
    return [piece[rank::world_size] for piece in kept], sum(len(piece) for piece in kept)
