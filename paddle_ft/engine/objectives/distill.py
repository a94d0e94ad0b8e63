"""The distillation objective: a student learns the teacher's softened answers (and the labels, where a text has
one). The teacher's logits of every training row are computed once, before training: it is frozen, so they
never change, and a step then costs no teacher forward pass. Under several processes each scores its share."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import paddle

from paddle_ft.data.features import Features
from paddle_ft.engine.batch_copies import to_device
from paddle_ft.engine.distributed import Distributed
from paddle_ft.engine.evaluate import predict_logits
from paddle_ft.engine.losses import distillation_loss
from paddle_ft.engine.objectives.classification import Classification


@dataclass(frozen=True)
class Distillation(Classification):
    """Scored like a classifier on dev and test; trained on `distillation_loss`."""

    teacher_logits: np.ndarray = field(default=None, compare=False)
    """[training rows, classes]: the teacher's logits of each training row (in the same order)."""
    temperature: float = 2.0
    alpha: float = 0.5

    def loss(self, model, features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        logits, batch = self._logits(model, features, indices, autocast)
        return distillation_loss(logits, to_device(self.teacher_logits[indices]),
                                 to_device(batch["labels"]), self.temperature, self.alpha)


def teacher_logits_of(teacher, features: Features, batch_size: int, pad_token_id: int,
                      dist: Distributed, autocast=contextlib.nullcontext) -> np.ndarray:
    """[rows, classes]: the teacher's logits of every row of `features`, in order (float32, whatever `autocast`
    computes in). Each rank scores every world_size-th row and the parts are gathered, so N processes share the pass
    instead of each making all of it."""
    mine = np.arange(dist.rank, len(features), dist.world_size)
    parts = dist.gather(predict_logits(teacher, features, batch_size, pad_token_id, subset=mine, autocast=autocast))
    logits = np.empty((len(features), parts[0].shape[1]), dtype=np.float32)
    for rank, part in enumerate(parts):
        logits[rank::dist.world_size] = part
    return logits


def release_device_memory() -> None:
    """Give what Python no longer holds (the teacher) back to the device: Paddle's GPU allocator keeps freed
    blocks for reuse by this process otherwise. Nothing to do on a CPU."""
    import gc

    gc.collect()
    if paddle.device.get_device().startswith("gpu"):
        paddle.device.cuda.empty_cache()
