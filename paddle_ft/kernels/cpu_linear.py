"""A faster backward for `nn.Linear` when training on CPU.

Paddle's CPU kernel for the bias gradient (a broadcast add's backward, a sum over batch x sequence)
is slow: for a [2048, 1024] output it takes ~18 ms, as long as the two weight-gradient matmuls
together, while the same sum as a matmul with a row of ones takes 0.25 ms. `FastLinear` computes
exactly the same gradients (bit-identical in the tests) with matmuls only. It is used in training
mode only: evaluation, `paddle.jit.save` and the exported graph keep Paddle's own `linear`.
"""
from __future__ import annotations

import functools
import types

import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer


class FastLinear(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias, add_bias=None):
        """add_bias: adds the bias to the matmul's output in place (the fused kernels' threaded one), instead of
        Paddle's addmm, which broadcasts it into the output on one thread first."""
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        # Paddle wants None for an input that needs no gradient: frozen weights (model.freeze_layers) and the
        # input of the first layer above frozen embeddings
        ctx.needs = (not x.stop_gradient, not weight.stop_gradient, bias is not None and not bias.stop_gradient)
        rows = x.reshape([-1, x.shape[-1]])  # [tokens, in]
        if bias is None:
            out = paddle.matmul(rows, weight)
        elif add_bias is not None:
            out = paddle.matmul(rows, weight)
            add_bias(out.detach(), bias)  # detached: the same storage, without the in-place check on leaves
        else:
            out = paddle.addmm(bias, rows, weight)
        return out.reshape(x.shape[:-1] + [weight.shape[1]])

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensor()
        rows = x.reshape([-1, x.shape[-1]])                    # [tokens, in]
        grad_rows = grad_out.reshape([-1, grad_out.shape[-1]])  # [tokens, out]
        need_x, need_weight, need_bias = ctx.needs
        grad_x = paddle.matmul(grad_out, weight, transpose_y=True) if need_x else None
        grad_weight = paddle.matmul(rows, grad_rows, transpose_x=True) if need_weight else None
        if not ctx.has_bias:
            return grad_x, grad_weight
        ones = paddle.ones([1, grad_rows.shape[0]], dtype=grad_rows.dtype)
        return grad_x, grad_weight, paddle.matmul(ones, grad_rows).reshape([-1]) if need_bias else None


def _forward(self: paddle.nn.Linear, x, add_bias=None):
    # under auto_cast (a GPU matter) x and weight may differ in dtype: Paddle's linear handles that
    if self.training and paddle.in_dynamic_mode() and x.dtype == self.weight.dtype:
        return FastLinear.apply(x, self.weight, self.bias, add_bias if x.place.is_cpu_place() else None)
    return F.linear(x, self.weight, self.bias, name=self.name)


def use_fast_linear(model: paddle.nn.Layer, add_bias=None) -> int:
    """Route every `nn.Linear` of `model` through `FastLinear` while training; returns how many. add_bias(out, bias):
    adds a CPU float32 bias in place (FastLinear.forward)."""
    linears = [layer for layer in model.sublayers(include_self=True) if isinstance(layer, paddle.nn.Linear)]
    forward = functools.partial(_forward, add_bias=add_bias) if add_bias else _forward
    for layer in linears:
        layer.forward = types.MethodType(forward, layer)
    return len(linears)
