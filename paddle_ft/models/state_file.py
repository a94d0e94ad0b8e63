"""`save_state`: a state dict written as `paddle.save` writes it, one tensor at a time.

`paddle.save` first copies every tensor of the dict into numpy, all at once, and only then pickles the copies: while
it writes, a second copy of the model (or of AdamW's two moments) is held. At e5-small's full vocabulary (118M
weights) a checkpoint's save raised a training run's peak from 3.0 to 4.5 GB. Here each tensor's copy is pickled and
let go before the next one is made. The file is the same format (a dict of numpy arrays and the
"StructuredToParameterName@@" table of the tensors' names, pickle protocol 4), which `paddle.load` reads unchanged.
"""
from __future__ import annotations

import contextlib
import pickle
from pathlib import Path

from paddle_ft.io import HashingWriter

NAME_TABLE = "StructuredToParameterName@@"  # paddle.save's key for {structured name: tensor name}
PROTOCOL = 4  # paddle.save's default


def save_state(state: dict, path: str | Path) -> str:
    """`paddle.save(state, path)` for a dict of tensors and plain values (an optimizer's master weights are a nested
    dict of tensors), holding one tensor's numpy copy at a time; the file's SHA-256, computed as it is written."""
    import paddle

    class Streaming(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, _TopLevel):  # paddle.save's state dict: the bare array, named in the table
                return obj.tensor.numpy().__reduce_ex__(PROTOCOL)
            if isinstance(obj, paddle.Tensor):  # any other tensor as paddle.save pickles one: (name, array)
                return tuple, ((obj.name, obj.numpy()),)
            return NotImplemented

    def holds_tensor(value) -> bool:
        if isinstance(value, dict):
            value = list(value.values())
        return isinstance(value, paddle.Tensor) or (isinstance(value, (list, tuple)) and any(map(holds_tensor, value)))

    # paddle.save's own rule: a dict whose values are tensors, or dicts without one, is a state dict (arrays and a
    # name table); any other is pickled as it is, each tensor as (name, array), and paddle.load reads either back
    if all(isinstance(value, paddle.Tensor) or (isinstance(value, dict) and not holds_tensor(value))
           for value in state.values()):
        names = {key: value.name for key, value in state.items() if isinstance(value, paddle.Tensor)}
        state = {**{key: _TopLevel(value) if isinstance(value, paddle.Tensor) else value
                    for key, value in state.items()}, NAME_TABLE: names}
    with open(path, "wb") as file, contextlib.closing(HashingWriter(file)) as hashing:
        pickler = Streaming(hashing, protocol=PROTOCOL)
        pickler.fast = True  # no memo: it would keep every array's bytes alive until the whole dict is written
        pickler.dump(state)
        return hashing.hexdigest()


class _TopLevel:
    """A tensor of a state dict, written as the bare numpy array (its name goes to the table)."""

    def __init__(self, tensor):
        self.tensor = tensor
