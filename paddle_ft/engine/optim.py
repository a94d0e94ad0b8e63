"""What updates the model: AdamW with weight-decay grouping, PaddleNLP's linear warmup-then-decay
schedule, and the precision (`StepRunner`); saved into and restored from checkpoints together."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import paddle

from paddle_ft.config import TrainConfig
from paddle_ft.engine.amp import StepRunner, engine_amp
from paddle_ft.engine.checkpoint import TrainState, load_checkpoint, save_checkpoint
from paddle_ft.engine.plan import RunPlan


def uses_weight_decay(parameter_name: str) -> bool:
    """Biases (the MLM head's `decoder_bias` too) and normalisation weights are not decayed (the usual BERT rule), nor
    a prototype head's scale (decay would pull its temperature towards 1)."""
    parts = parameter_name.lower().split(".")
    return not parts[-1].endswith("bias") and parts[-1] != "log_scale" and not any("norm" in part for part in parts)


def learning_rate_ratio(name: str, num_layers: int, layer_decay: float, head_ratio: float) -> float:
    """The share of the schedule's learning rate that parameter `name` of a classifier learns at: encoder
    layer l (1..L) decay^(L - l), the embeddings decay^L, the pooler 1, the classifier head `head_ratio`."""
    if name.startswith("classifier."):
        return head_ratio
    if name.startswith("encoder.embeddings."):
        return layer_decay ** num_layers
    if name.startswith("encoder.encoder.layers."):
        return layer_decay ** (num_layers - 1 - int(name.split(".")[3]))
    return 1.0


def build_optimizer(model: paddle.nn.Layer, learning_rate: float, weight_decay: float, total_steps: int,
                    warmup_steps: int, layer_lr_decay: float = 1.0, head_learning_rate: float | None = None):
    """AdamW over `model`'s trainable parameters and the LR scheduler that drives it; parameters that learn at
    another rate (layer-wise decay, the head's own rate) form parameter groups scaled by their ratio."""
    from paddlenlp.transformers import LinearDecayWithWarmup

    scheduler = LinearDecayWithWarmup(learning_rate, total_steps, warmup_steps)
    num_layers = len(model.encoder.encoder.layers) if hasattr(model, "encoder") else 0
    head_ratio = 1.0 if head_learning_rate is None else head_learning_rate / learning_rate
    groups: dict[float, list] = {}
    for name, parameter in model.named_parameters():
        if not parameter.stop_gradient:
            ratio = learning_rate_ratio(name, num_layers, layer_lr_decay, head_ratio)
            groups.setdefault(ratio, []).append(parameter)
    # AdamW asks about each parameter by its internal name (p.name), not its attribute path.
    decayed = {p.name for name, p in model.named_parameters() if uses_weight_decay(name)}
    parameters = [{"params": params, "learning_rate": ratio} for ratio, params in groups.items()] \
        if len(groups) > 1 else [p for params in groups.values() for p in params]
    optimizer = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=parameters, weight_decay=weight_decay,
                                       apply_decay_param_fun=lambda name: name in decayed)
    return optimizer, scheduler


@dataclass
class Optimization:
    model: paddle.nn.Layer
    """The model being trained (AMP O2: its decorated, low-precision self), never the DataParallel wrapper."""
    optimizer: paddle.optimizer.Optimizer
    scheduler: object
    runner: StepRunner
    trainable: list
    """The parameters clipping looks at, listed once (not on every step)."""

    @classmethod
    def build(cls, model, config: TrainConfig, plan: RunPlan) -> Optimization:
        o = config.optimizer
        optimizer, scheduler = build_optimizer(model, o.learning_rate, o.weight_decay, plan.total_steps,
                                               plan.warmup_steps, o.layer_lr_decay, o.head_learning_rate)
        device = paddle.device.get_device()
        on_cpu = device.startswith("cpu")
        runner = StepRunner(engine_amp(config.amp, device), config.optimizer.max_grad_norm,
                            fused=config.runtime.fused_kernels and on_cpu, drop_grads=on_cpu)
        model, optimizer = runner.prepare(model, optimizer)
        return cls(model, optimizer, scheduler, runner, [p for p in model.parameters() if not p.stop_gradient])

    @property
    def learning_rate(self) -> float:
        return self.optimizer.get_lr()

    def update(self, finite: bool) -> tuple[paddle.Tensor | None, bool]:
        """One optimizer step from the accumulated gradients (dropped when the loss was not finite), then
        the schedule. Returns (pre-clip gradient norm or None, whether the update was skipped)."""
        if finite:
            grad_norm, skipped = self.runner.step(self.optimizer, self.trainable)
        else:
            self.runner.clear_grads(self.optimizer)
            grad_norm, skipped = None, True
        self.scheduler.step()
        return grad_norm, skipped

    def save(self, checkpoints_dir: Path, state: TrainState, rng_states: list[dict]) -> Path:
        return save_checkpoint(checkpoints_dir, self.model, self.optimizer, self.scheduler, self.runner.scaler, state,
                               rng_states)

    def restore(self, path: Path, rank: int) -> TrainState:
        return load_checkpoint(path, self.model, self.optimizer, self.scheduler, self.runner.scaler, rank)
