"""The classifier's loss: cross-entropy or focal loss, each with optional per-class weights (for a rare class
that matters, such as fraud or an adverse event)."""
from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F

from paddle_ft.errors import ConfigError


def balanced_class_weights(labels: np.ndarray, label_names: tuple[str, ...]) -> tuple[float, ...]:
    """Inverse class frequency, normalised so the average training example weighs 1: w_c = N / (C x n_c)
    (scikit-learn's "balanced"), so the loss keeps its scale and the learning rate its meaning."""
    counts = np.bincount(labels, minlength=len(label_names))
    missing = [name for name, count in zip(label_names, counts) if count == 0]
    if missing:
        raise ConfigError("train.class_weights", f"auto weighs each label by its training examples, but "
                          f"{', '.join(missing)} has none: give the weights as a list, or add examples")
    return tuple(float(len(labels) / (len(label_names) * count)) for count in counts)


def class_weights(setting: str | tuple[float, ...] | None, labels: np.ndarray,
                  label_names: tuple[str, ...]) -> tuple[float, ...] | None:
    """`train.class_weights` made concrete for this training data (None = every class weighs 1)."""
    if setting is None:
        return None
    if setting == "auto":
        return balanced_class_weights(labels, label_names)
    if len(setting) != len(label_names):  # data.labels unset: the labels were only known from the data
        raise ConfigError("train.class_weights", f"has {len(setting)} weights for {len(label_names)} labels "
                          f"({', '.join(label_names)}): give one per label, in that order")
    return tuple(setting)


def classification_loss(logits: paddle.Tensor, labels: paddle.Tensor, kind: str = "cross_entropy",
                        weights: tuple[float, ...] | None = None, gamma: float = 2.0) -> paddle.Tensor:
    """The summed loss of a batch: logits [n, classes] (float32), labels [n] (int64)."""
    if kind == "cross_entropy" and weights is None:
        return F.cross_entropy(logits, labels, reduction="sum")
    log_p = paddle.take_along_axis(F.log_softmax(logits, axis=-1), labels.unsqueeze(-1), axis=-1).squeeze(-1)
    per_example = -log_p  # [n]
    if kind == "focal":
        per_example = per_example * (1.0 - paddle.exp(log_p)) ** gamma
    if weights is not None:
        per_example = per_example * paddle.gather(paddle.to_tensor(weights, dtype="float32"), labels)
    return per_example.sum()


def level_loss(logits: paddle.Tensor, labels: paddle.Tensor, hierarchy) -> paddle.Tensor:
    """The summed cross-entropy of a label tree's upper levels (`paddle_ft.models.hierarchy.Hierarchy`): at each, a
    node's probability is its leaves' sum under the softmax over leaves. logits [n, leaves] float32; labels [n] leaf
    ids."""
    log_p = F.log_softmax(logits, axis=-1)  # [n, leaves]
    total = paddle.zeros([], dtype="float32")
    for level in range(1, hierarchy.depth):
        ids = paddle.to_tensor(hierarchy.node_ids(level))
        gold_node = paddle.gather(ids, labels)  # [n]
        # log of the sum of the gold node's leaves: the other leaves masked to -inf before logsumexp
        under = ids.unsqueeze(0) == gold_node.unsqueeze(-1)  # [n, leaves]
        total = total - paddle.logsumexp(paddle.where(under, log_p, paddle.full_like(log_p, -1e30)), axis=-1).sum()
    return total


def multi_label_loss(logits: paddle.Tensor, targets: paddle.Tensor) -> paddle.Tensor:
    """The summed loss of a batch of multi-label texts: each text's binary cross-entropy averaged over the
    labels (a sigmoid per label). logits and targets (0/1) [n, labels], float32."""
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").mean(axis=-1).sum()


def distillation_loss(logits: paddle.Tensor, teacher_logits: paddle.Tensor, labels: paddle.Tensor,
                      temperature: float, alpha: float) -> paddle.Tensor:
    """The summed loss of a batch for a student: alpha x T^2 x KL(teacher's softened distribution || the student's)
    (Hinton et al., 2015: T^2 keeps the soft gradients' scale as T changes) + (1 - alpha) x cross-entropy with the
    label, for the rows that have one (label -1: an unlabeled text, soft loss only). logits, teacher_logits
    [n, classes] float32; labels [n] int64."""
    soft_target = F.softmax(teacher_logits / temperature, axis=-1)
    log_student = F.log_softmax(logits / temperature, axis=-1)
    kl = (soft_target * (paddle.log(soft_target.clip(min=1e-12)) - log_student)).sum(axis=-1)  # [n]
    labelled = (labels >= 0).astype("float32")
    hard = F.cross_entropy(logits, labels.clip(min=0), reduction="none").reshape([-1]) * labelled
    return (alpha * temperature ** 2 * kl + (1 - alpha) * hard).sum()
