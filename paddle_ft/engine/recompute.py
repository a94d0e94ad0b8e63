"""Activation recomputation (`train.runtime.recompute`): each encoder layer keeps only its input in forward and
computes its activations again in backward, trading about a third more compute for the memory that the
activations of every layer would hold at once (what limits batch size and length on a GPU)."""
from __future__ import annotations

import paddle


def use_recompute(model: paddle.nn.Layer) -> int:
    """Recompute every encoder layer of `model` while training; returns how many layers. Dropout draws the
    same numbers again in backward (the RNG state is preserved), so gradients do not change."""
    from paddle.distributed.fleet.utils import recompute

    layers = list(model.encoder.encoder.layers)
    for layer in layers:
        def forward(*args, _layer=layer, _forward=layer.forward, **kwargs):
            if not _layer.training or not paddle.in_dynamic_mode():
                return _forward(*args, **kwargs)
            return recompute(_forward, *args, use_reentrant=False, **kwargs)

        # past PaddleNLP's __setattr__ patch, which would take `forward` for an unbound method of the layer
        object.__setattr__(layer, "forward", forward)
    return len(layers)
