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

    def describe(self) -> str:
        """The clauses training's settings line adds (empty when nothing was applied)."""
        fused = ("attention, layer norm, GELU, dropout" + (", linear biases" if self.fast_linear else ""))
        return ((", matmul-only linear gradients" if self.fast_linear else "")
                + (f", fused CPU kernels ({fused}) in {self.fused_layers} layers, AdamW's update (with any clipping) "
                   "in one kernel" if self.fused_layers else ""))


def speed_up_cpu_training(model, fast_linear: bool, fused_kernels: bool) -> CpuSpeedups:
    """Patches `model`'s layers for training on a CPU, as `train.runtime.fast_cpu_linear` and `.fused_kernels` say.
    Call it before activation recomputation, which recomputes each layer's forward as it is then."""
    from paddle_ft.kernels.cpu_linear import use_fast_linear
    from paddle_ft.kernels.fused import kernels, use_fused_kernels

    fused, why_not = use_fused_kernels(model) if fused_kernels else (0, None)
    if fast_linear:  # with the fused kernels, the linears' biases are added by theirs
        use_fast_linear(model, add_bias=kernels()[0].paddle_ft_add_bias if fused else None)
    return CpuSpeedups(fast_linear, fused, why_not)
