"""CPU speed patches for training, kept apart from the engine: matmul-only gradients for `nn.Linear`
(`cpu_linear.py`) and fused C++ kernels for attention's core, layer norm, GELU, dropout, the linears' biases,
gradient clipping and AdamW's update (`fused.py`, `fused_kernels.cc`). Each computes what Paddle's own ops compute
(tests/kernels/ hold them to it, 1e-5 or bit for bit); training applies the layers' kernels with one call,
`speed_up_cpu_training` (the engine's StepRunner the optimizer's), and evaluation, export and inference run Paddle's
own ops."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CpuSpeedups:
    """What `speed_up_cpu_training` put in place."""

    fast_linear: bool
    fused_layers: int
    """Encoder layers routed through the fused kernels (0: none)."""
    fused_unavailable: str | None = None
    """Why the fused kernels were asked for and could not be built (no compiler, a failed build)."""
    bf16_matmuls: bool = False
    """The linear layers' matmuls in bfloat16 (train.amp with dtype bfloat16 on a CPU)."""

    def describe(self) -> str:
        """The clauses training's settings line adds (empty when nothing was applied)."""
        fused = ("attention, layer norm, GELU, dropout" + (", linear biases" if self.fast_linear else ""))
        return ((", matmul-only linear gradients" if self.fast_linear else "")
                + (f", fused CPU kernels ({fused}) in {self.fused_layers} layers, AdamW's update (with any clipping) "
                   "in one kernel" if self.fused_layers else "")
                + (", the linear layers' matmuls in bfloat16 (oneDNN; weights, activations, gradients and updates "
                   "float32)" if self.bf16_matmuls else ""))


def speed_up_cpu_training(model, fast_linear: bool, fused_kernels: bool, bf16: bool = False) -> CpuSpeedups:
    """Patches `model`'s layers for training on a CPU, as `train.runtime.fast_cpu_linear` and `.fused_kernels` say,
    and with `bf16` (train.amp, dtype bfloat16) the linear layers' matmuls in bfloat16. Call it before activation
    recomputation, which recomputes each layer's forward as it is then."""
    from paddle_ft.kernels.cpu_linear import use_fast_linear
    from paddle_ft.kernels.fused import kernels, use_fused_kernels

    bf16_kernels = bfloat16_kernels(fast_linear) if bf16 else None
    fused, why_not = use_fused_kernels(model) if fused_kernels else (0, None)
    if fast_linear:  # with the fused kernels, the linears' biases are added by theirs
        use_fast_linear(model, add_bias=kernels()[0].paddle_ft_add_bias if fused else None, bf16=bf16_kernels)
    return CpuSpeedups(fast_linear, fused, why_not, bf16_kernels is not None)


def bfloat16_unavailable(fast_linear: bool) -> str | None:
    """Why the linear layers cannot run the bfloat16 GEMM here (said after "bfloat16 training on a CPU"), or None:
    what train.amp auto falls back to float32 for, and what an explicit request is refused with."""
    from paddle_ft.kernels.fused import ONEDNN, kernels

    if not fast_linear:
        return "runs through paddle_ft's linear layers, and train.runtime.fast_cpu_linear is off"
    module, why_not = kernels()
    if module is None:
        return f"runs on paddle_ft's kernels, and {why_not}"
    if not hasattr(module, "paddle_ft_bfloat16_gemm"):
        return f"needs the oneDNN library Paddle ships ({ONEDNN}), which this Paddle lacks"
    return None


def bfloat16_kernels(fast_linear: bool):
    """The built kernels' module, which holds the bfloat16 GEMM; a ConfigError naming what is missing otherwise."""
    from paddle_ft.errors import ConfigError
    from paddle_ft.kernels.fused import kernels

    why_not = bfloat16_unavailable(fast_linear)
    if why_not is not None:
        raise ConfigError("train.amp.dtype", f"bfloat16 training on a CPU {why_not}; set train.amp.enabled=false")
    return kernels()[0]
