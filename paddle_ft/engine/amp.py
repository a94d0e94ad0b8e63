"""Mixed precision, loss scaling, clipping and the optimizer step, in one small helper."""
from __future__ import annotations

import contextlib

import paddle

from paddle_ft.config import AmpConfig


class StepRunner:
    """Runs backward and the optimizer update under the configured precision.

    float16 uses a dynamic `GradScaler`: the loss is scaled up before backward, gradients are unscaled
    before clipping, and a step whose gradients hold inf/NaN is skipped (and counted) while the scale
    shrinks. bfloat16 has float32's range, so it needs no scaling. With AMP off every call is plain fp32.
    """

    def __init__(self, amp: AmpConfig, max_grad_norm: float | None):
        self.amp = amp
        self.max_grad_norm = max_grad_norm
        self.scaler = paddle.amp.GradScaler(enable=amp.enabled and amp.dtype == "float16",
                                            init_loss_scaling=amp.init_loss_scaling)
        self._skipped = paddle.zeros([], dtype="int64")  # summed on device: no host sync per step

    def prepare(self, model, optimizer):
        """O2 keeps weights in low precision with fp32 master copies: it needs the decorated pair."""
        if self.amp.enabled and self.amp.level == "O2":
            model, optimizer = paddle.amp.decorate(models=model, optimizers=optimizer, level="O2",
                                                   dtype=self.amp.dtype, master_weight=True)
        return model, optimizer

    def autocast(self):
        if not self.amp.enabled:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(enable=True, level=self.amp.level, dtype=self.amp.dtype)

    def backward(self, loss: paddle.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer, parameters) -> paddle.Tensor | None:
        """Unscale, clip, update, clear grads. Returns the pre-clip global norm (None: no clipping)."""
        grad_norm = self.unscale_and_clip(optimizer, parameters)
        self.scaler.step(optimizer)  # skips the update when the unscaled gradients hold inf/NaN
        self.scaler.update()
        optimizer.clear_grad()
        return grad_norm

    def unscale_and_clip(self, optimizer, parameters) -> paddle.Tensor | None:
        self.scaler.unscale_(optimizer)
        if self.scaler.is_enable():
            self._skipped += self.scaler._found_inf.astype("int64").sum()
        if self.max_grad_norm is None:
            return None
        return paddle.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm)

    def skip(self, optimizer) -> None:
        """Drop this step's gradients (its loss was not finite) and count it as skipped."""
        optimizer.clear_grad()
        self._skipped += 1

    @property
    def skipped_steps(self) -> int:
        """Updates skipped: float16 overflows found by the scaler, plus non-finite losses."""
        return int(self._skipped)

    @skipped_steps.setter
    def skipped_steps(self, count: int) -> None:
        self._skipped = paddle.full([], count, dtype="int64")

    @property
    def loss_scale(self) -> float:
        return self.scaler._scale.item() if self.scaler.is_enable() else 1.0
