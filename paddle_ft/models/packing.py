"""Padding-free batches (`train.runtime.packed_batches`): a training batch's texts side by side in one row of tokens,
with no padding, each text's positions from 0 and attention kept inside each text. While a packed forward runs, the
texts' boundaries are held here, where the encoder's fused layers (kernels/fused.py) read them; a layer that cannot
read them must never see a packed row (`packs_texts` marks the ones that can)."""
from __future__ import annotations

import contextlib
import contextvars

_offsets = contextvars.ContextVar("packed_offsets", default=None)
PACKS_TEXTS = "packs_texts"  # the attribute kernels/fused.py sets on an encoder layer that reads the boundaries


@contextlib.contextmanager
def packed(offsets):
    """The block runs a packed forward: text s spans tokens offsets[s] to offsets[s + 1] (an int64 tensor)."""
    token = _offsets.set(offsets)
    try:
        yield
    finally:
        _offsets.reset(token)


def packed_offsets():
    """The boundaries of the packed forward running now, or None."""
    return _offsets.get()


def packs_texts(layer) -> bool:
    return getattr(layer, PACKS_TEXTS, False)
