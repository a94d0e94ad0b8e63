"""A training micro-batch's arrays put on the training device. On a GPU each is built in pinned (page-locked) host
memory and copied without blocking the host (`Tensor.cuda(blocking=False)`): `paddle.to_tensor(array)` copies from
pageable memory, synchronously, on Paddle's blocking default stream, so every micro-batch's 2-4 copies each waited
for the device. A pinned source must live until its copy has run: each is kept until the step's one host read (a
sync: `copies_done`), then let go. On a CPU the array is the tensor, as before."""
from __future__ import annotations

import numpy as np
import paddle

_in_flight: list = []  # this step's pinned sources, kept until the step's host read


def to_device(array: np.ndarray, dtype: str | None = None) -> paddle.Tensor:
    if not paddle.device.get_device().startswith("gpu"):
        return paddle.to_tensor(array, dtype=dtype)
    pinned = paddle.to_tensor(array, dtype=dtype, place=paddle.CUDAPinnedPlace())
    _in_flight.append(pinned)
    return pinned.cuda(blocking=False)


def copies_done() -> None:
    """After the step's host read (every copy queued before it has run): the pinned sources may go."""
    _in_flight.clear()
