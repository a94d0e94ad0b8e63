"""A faster backward for `nn.Linear` when training on CPU.

Paddle's CPU kernel for the bias gradient (a broadcast add's backward, a sum over batch x sequence)
is slow: for a [2048, 1024] output it takes ~18 ms, as long as the two weight-gradient matmuls
together, while the same sum as a matmul with a row of ones takes 0.25 ms. `FastLinear` computes
exactly the same gradients (bit-identical in the tests) with matmuls only. It is used in training
mode only: evaluation, `paddle.jit.save` and the exported graph keep Paddle's own `linear`.

With `bf16` (the fused kernels' module; bfloat16 training on a CPU that has bfloat16 arithmetic), its three matmuls
run on oneDNN's bfloat16 GEMM (fused_kernels.cc): each operand rounded to bfloat16 once (the input and the weight in
the forward, kept for the backward in half the memory; the output's gradient once for both of its matmuls), the
products summed in float32. Weights, biases, activations and gradients stay float32, so the optimizer keeps float32
master weights without any copy of its own.
"""
from __future__ import annotations

import functools
import types

import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer


class FastLinear(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias, add_bias=None, bf16=None):
        """add_bias: adds the bias to the matmul's output in place (the fused kernels' threaded one), instead of
        Paddle's addmm, which broadcasts it into the output on one thread first. bf16: the kernels' module, whose
        bfloat16 GEMM runs the matmuls."""
        ctx.has_bias = bias is not None
        # Paddle wants None for an input that needs no gradient: frozen weights (model.freeze_layers) and the
        # input of the first layer above frozen embeddings
        ctx.needs = (not x.stop_gradient, not weight.stop_gradient, bias is not None and not bias.stop_gradient)
        ctx.bf16, ctx.x_shape = bf16, x.shape
        rows = x.reshape([-1, x.shape[-1]])  # [tokens, in]
        if bf16 is not None:
            rows16, weight16 = bf16.paddle_ft_to_bfloat16(rows), bf16.paddle_ft_to_bfloat16(weight)
            ctx.save_for_backward(rows16, weight16)
            out = bf16.paddle_ft_bfloat16_gemm(rows16, weight16, False, False)
            if bias is not None:
                if add_bias is not None:
                    add_bias(out.detach(), bias)
                else:
                    out = out + bias
            return out.reshape(x.shape[:-1] + [weight.shape[1]])
        ctx.save_for_backward(x, weight)
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
        if ctx.bf16 is not None:  # rows and weight are the forward's bfloat16 copies
            gemm, grad16 = ctx.bf16.paddle_ft_bfloat16_gemm, ctx.bf16.paddle_ft_to_bfloat16(grad_rows)
            grad_x = gemm(grad16, weight, False, True).reshape(ctx.x_shape) if need_x else None
            grad_weight = gemm(rows, grad16, True, False) if need_weight else None
        else:
            grad_x = paddle.matmul(grad_out, weight, transpose_y=True) if need_x else None
            grad_weight = paddle.matmul(rows, grad_rows, transpose_x=True) if need_weight else None
        if not ctx.has_bias:
            return grad_x, grad_weight
        ones = paddle.ones([1, grad_rows.shape[0]], dtype=grad_rows.dtype)
        return grad_x, grad_weight, paddle.matmul(ones, grad_rows).reshape([-1]) if need_bias else None


def _forward(self: paddle.nn.Linear, x, add_bias=None, bf16=None):
    # under auto_cast (a GPU matter) x and weight may differ in dtype: Paddle's linear handles that
    if self.training and paddle.in_dynamic_mode() and x.dtype == self.weight.dtype:
        on_cpu = x.place.is_cpu_place()
        return FastLinear.apply(x, self.weight, self.bias, add_bias if on_cpu else None,
                                bf16 if on_cpu and x.dtype == paddle.float32 else None)
    return F.linear(x, self.weight, self.bias, name=self.name)


def use_fast_linear(model: paddle.nn.Layer, add_bias=None, bf16=None) -> int:
    """Route every `nn.Linear` of `model` through `FastLinear` while training; returns how many. add_bias(out, bias):
    adds a CPU float32 bias in place (FastLinear.forward); bf16: the kernels' module, for bfloat16 matmuls (each
    layer then carries it as `bf16_kernels`, for the fused FFN's own matmul)."""
    linears = [layer for layer in model.sublayers(include_self=True) if isinstance(layer, paddle.nn.Linear)]
    forward = functools.partial(_forward, add_bias=add_bias, bf16=bf16)
    for layer in linears:
        layer.forward = types.MethodType(forward, layer)
        layer.bf16_kernels = bf16
    return len(linears)


def bf16_matmul(x, linear: paddle.nn.Linear):
    """x @ linear.weight, through FastLinear's bfloat16 GEMM where use_fast_linear gave the layer one (training on
    CPU); None otherwise."""
    module = getattr(linear, "bf16_kernels", None)
    if module is None or not (linear.training and x.dtype == paddle.float32 and x.place.is_cpu_place()):
        return None
    return FastLinear.apply(x, linear.weight, None, None, module)
