"""AdamW with weight-decay grouping and PaddleNLP's linear warmup-then-decay schedule."""
from __future__ import annotations

import paddle

from paddle_ft.config import TrainConfig


def uses_weight_decay(parameter_name: str) -> bool:
    """Biases and normalisation weights are not decayed (the usual BERT fine-tuning rule)."""
    parts = parameter_name.lower().split(".")
    return parts[-1] != "bias" and not any("norm" in part for part in parts)


def build_optimizer(model: paddle.nn.Layer, config: TrainConfig, total_steps: int, warmup_steps: int):
    """AdamW over `model`'s trainable parameters and the LR scheduler that drives it."""
    from paddlenlp.transformers import LinearDecayWithWarmup

    scheduler = LinearDecayWithWarmup(config.learning_rate, total_steps, warmup_steps)
    parameters = [p for p in model.parameters() if not p.stop_gradient]
    # AdamW asks about each parameter by its internal name (p.name), not its attribute path.
    decayed = {p.name for name, p in model.named_parameters() if uses_weight_decay(name)}
    optimizer = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=parameters,
                                       weight_decay=config.weight_decay,
                                       apply_decay_param_fun=lambda name: name in decayed)
    return optimizer, scheduler
