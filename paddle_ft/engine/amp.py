"""Mixed precision, loss scaling, clipping and the optimizer step, in one small helper."""
from __future__ import annotations

import contextlib
import dataclasses

import paddle

from paddle_ft import runtime
from paddle_ft.config import AmpConfig
from paddle_ft.errors import ConfigError
from paddle_ft.kernels import bfloat16_unavailable
from paddle_ft.kernels import fused as fused_kernels


class StepRunner:
    """Runs backward and the optimizer update under the configured precision.

    float16 uses a dynamic `GradScaler`: the loss is scaled up before backward, gradients are unscaled
    before clipping, and a step whose gradients hold inf/NaN is skipped (and counted) while the scale
    shrinks. bfloat16 has float32's range, so it needs no scaling. With AMP off every call is plain fp32.
    """

    def __init__(self, amp: AmpConfig, max_grad_norm: float | None, fused: bool = False, drop_grads: bool = False):
        self.amp = dataclasses.replace(amp, enabled=amp.enabled is True)  # Paddle's AMP only where asked ("auto": not)
        self.max_grad_norm = max_grad_norm
        # clipping and AdamW's update of float32 CPU parameters in the fused kernels (train.runtime.fused_kernels)
        self.fused = fused
        # after a step, drop the gradients instead of filling them with zeros (on CPU): the fill runs on one thread,
        # and the next backward then adds each first gradient into the zeros, where a dropped one is taken as it
        # comes; 22 ms a step at e5-small's shape, length 50 (909 -> 887 ms in an in-process A/B: 1.025x)
        self.drop_grads = drop_grads
        self.scaler = paddle.amp.GradScaler(enable=amp.enabled and amp.dtype == "float16",
                                            init_loss_scaling=amp.init_loss_scaling)

    def prepare(self, model, optimizer):
        """O2 keeps weights in low precision with fp32 master copies: it needs the decorated pair. master_grad:
        gradients in float32 too, so that micro-batches are summed (accumulation), clipped and decayed in float32;
        without it Paddle sums float16/bfloat16 gradients, which loses the small ones of later micro-batches."""
        if self.amp.enabled and self.amp.level == "O2":
            kept = model.float32_layers() if hasattr(model, "float32_layers") else None  # the head, the embeddings
            model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2",
                                                   dtype=self.amp.dtype, master_weight=True, master_grad=True,
                                                   excluded_layers=kept)
        return model, optimizer

    def autocast(self):
        if not self.amp.enabled:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, level=self.amp.level, dtype=self.amp.dtype)

    def backward(self, loss: paddle.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer, parameters) -> tuple[paddle.Tensor | None, bool]:
        """Unscale, clip, update, clear grads. Returns (the pre-clip global norm, None without clipping;
        whether the scaler skipped the update for inf/NaN gradients)."""
        if self.fused and not self.scaler.is_enable():
            update = fused_kernels.adamw_update(optimizer)
            if update is not None:
                grad_norm = self._clip_into(update, parameters)
                self.clear_grads(optimizer)
                return grad_norm, False
        grad_norm = self.unscale_and_clip(optimizer, parameters)
        self.scaler.step(optimizer)  # skips the update when the unscaled gradients hold inf/NaN
        # Paddle's eager optimizer has read the overflow flag on the host to decide (Optimizer._apply_optimize) and
        # left its answer as a Python bool: taking it costs no second sync with the device
        overflow = self.scaler.is_enable() and bool(self.scaler._cache_found_inf)
        self.scaler.update()
        self.clear_grads(optimizer)
        return grad_norm, overflow

    def clear_grads(self, optimizer) -> None:
        optimizer.clear_grad(set_to_zero=not self.drop_grads)

    def _clip_into(self, update, parameters) -> paddle.Tensor | None:
        """AdamW's update in one kernel (kernels/fused.adamw_update) with clipping folded in: the clip kernel takes
        the global norm and its factor without scaling anything, and the update reads every gradient times that
        factor; one pass over the gradients fewer, and one kernel for the ~200 of Paddle's AdamW. Returns the
        pre-clip norm."""
        if self.max_grad_norm is None:
            update()
            return None
        grads = [p.grad_ for p in parameters if p.grad_ is not None]
        grad_norm, factor = fused_kernels.clip_grad_norm(grads, self.max_grad_norm, in_place=False)
        update(factor)
        return grad_norm

    def unscale_and_clip(self, optimizer, parameters) -> paddle.Tensor | None:
        self.scaler.unscale_(optimizer)
        if self.max_grad_norm is None:
            return None
        return clip_grad_norm(parameters, self.max_grad_norm, self.fused)

    @property
    def loss_scale(self) -> float:
        return self.scaler._scale.item() if self.scaler.is_enable() else 1.0


@paddle.no_grad()
def clip_grad_norm(parameters, max_norm: float, fused: bool = False) -> paddle.Tensor:
    """Scale all gradients so that their global L2 norm is at most `max_norm`; returns the norm before.

    Paddle's `clip_grad_norm_` stacks the per-tensor norms in each gradient's own dtype, which fails when
    they differ: AMP O2 keeps LayerNorm weights (so their gradients) in float32 and the rest in float16
    (`InvalidArgument ... float16 does not match float32`; on CPU float16 has no p_norm kernel at all). Here
    every sum of squares is taken in float32, where a float16 one cannot overflow, and each gradient is scaled in
    its own dtype. Sums of squares, not Paddle's p_norm: on CPU p_norm took 5.5% of a training step (56 ms for the
    bench model's gradients against 4 ms) and is the less exact (0.7% off on a word-embedding gradient, where a sum
    of squares is within 1e-6 of a float64 one; tests/engine/test_gpu_path.py). `fused`: float32 CPU gradients go
    through one C++ kernel (kernels/fused.py), the same function in one threaded pass, where the ops below dispatch
    three per gradient: 17.6-19.5 -> 6.9-7.0 ms a step for e5-small's gradients.
    """
    grads = [p.grad_ for p in parameters if p.grad_ is not None]  # grad_: the gradient itself, to scale in place
    if not grads:
        return paddle.zeros([], dtype="float32")
    if fused and all(g.dtype == paddle.float32 and g.place.is_cpu_place() for g in grads):
        clipped = fused_kernels.clip_grad_norm(grads, max_norm)
        if clipped is not None:
            return clipped[0]
    squares = [paddle.sum(paddle.square(g.detach() if g.dtype == paddle.float32 else g.detach().astype("float32")))
               for g in grads]
    total = paddle.sqrt(paddle.add_n(squares))
    scale = paddle.clip(max_norm / (total + 1e-6), max=1.0)
    if total.place.is_cpu_place() and float(scale) == 1.0:
        return total  # nothing to scale (most steps): on CPU reading it costs nothing, the multiplies 1.5% of a step
    for g in grads:
        g.multiply_(scale if g.dtype == paddle.float32 else scale.astype(g.dtype))
    return total


def set_tf32(enabled: bool | None) -> None:
    """TF32 for float32 matmuls (cuBLAS) on GPUs that have it, as train.amp.tf32 says: None leaves Paddle's switch
    as it is (on, Paddle's default: a fp32 run is as fast as in plain Paddle). A process-wide switch; on a CPU it
    changes nothing."""
    if enabled is None:
        return
    from paddle.base import core

    core.set_cublas_switch(enabled)


# train.amp.enabled auto: bfloat16 from this width on (the narrowest input of the model's linear layers). Measured on
# a 2-core AVX-512+BF16 AMD EPYC, a linear layer's forward and backward over 1,920 rows: 1.19x float32 at 32 wide,
# 1.46x at 128, 1.63x at 256, 1.81x at 384; e5-small's whole training step 1.62-1.67x (docs/performance.md)
BF16_MIN_WIDTH = 256
PRECISION_LINE = "precision: "  # how auto's choice is said (init's forecast repeats it)


def bf16_on_cpu(amp: AmpConfig, device: str, width: int, fast_linear: bool = True) -> tuple[bool, str | None]:
    """Whether training on this CPU runs the linear layers' matmuls in bfloat16 (paddle_ft's kernels,
    kernels/cpu_linear.py: Paddle's auto_cast does nothing on a CPU), and for train.amp.enabled auto the line that
    says what was chosen and why. `width`: the narrowest input of the model's linear layers (its hidden size)."""
    if not device.startswith("cpu"):
        return False, None
    if amp.enabled != "auto":
        return amp.enabled is True and amp.dtype == "bfloat16", None
    chosen = PRECISION_LINE + "{} (train.amp.enabled auto: {}; train.amp.enabled={} overrules)"
    if not runtime.cpu_supports_bf16():
        return False, chosen.format("float32", f"this {runtime.cpu_kind()} CPU has no bfloat16 arithmetic", "true")
    if width < BF16_MIN_WIDTH:
        return False, chosen.format("float32", f"bfloat16 pays from {BF16_MIN_WIDTH} wide, and this model is "
                                    f"{width}", "true -o train.amp.dtype=bfloat16")
    why_not = bfloat16_unavailable(fast_linear)
    if why_not is not None:
        return False, chosen.format("float32", f"bfloat16 training on a CPU {why_not}", "true")
    return True, chosen.format("the linear layers' matmuls in bfloat16", f"this {runtime.cpu_kind()} CPU runs a "
                               f"{width}-wide model's linear layers 1.6-1.8x faster so (docs/performance.md)", "false")


def engine_amp(amp: AmpConfig, device: str) -> AmpConfig:
    """What the StepRunner applies through Paddle (auto_cast, decorate, the loss scaler): nothing on a CPU, where
    Paddle's AMP does nothing (auto_cast warns and runs float32) and bfloat16 runs in paddle_ft's kernels instead."""
    return dataclasses.replace(amp, enabled=False) if device.startswith("cpu") else amp


def check_amp_supported(amp: AmpConfig, device: str) -> None:
    """Refuse a precision this device cannot run: below compute capability 8.0 (V100, T4) bfloat16, and below
    7.0 float16, make `auto_cast` warn and run float32 and `decorate` return the model unchanged, so the
    run would be float32 while its config and logs say otherwise; a CPU without bfloat16 arithmetic (AVX512-BF16,
    AMX) would run bfloat16 slower than float32. float16 on a CPU changes nothing (docs/operations.md)."""
    if amp.enabled is True and amp.dtype == "bfloat16" and device.startswith("cpu") and not runtime.cpu_supports_bf16():
        raise ConfigError("train.amp.dtype", f"bfloat16 training on a CPU needs bfloat16 arithmetic (AVX512-BF16 or "
                          f"AMX), which this {runtime.cpu_kind()} CPU lacks: it would run slower than float32; set "
                          "train.amp.enabled=false")
    if amp.enabled is not True or not device.startswith("gpu"):
        return
    supported = paddle.amp.is_bfloat16_supported if amp.dtype == "bfloat16" else paddle.amp.is_float16_supported
    if not supported(device):
        name = paddle.device.cuda.get_device_name() if paddle.is_compiled_with_cuda() else device
        raise ConfigError("train.amp.dtype", f"{amp.dtype} is not supported on {name} (Paddle would silently run "
                          "float32); use float16 on compute capability 7.0+, bfloat16 on 8.0+, or "
                          "train.amp.enabled=false")
