"""The few-shot recipe's objective (SetFit's, on a prototype head): contrastive tuning of the encoder on pairs of
training rows, each class's prototype the mean of its rows' vectors. Scored like any single-label classifier."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle

from paddle_ft.data.features import Features, pad_batch
from paddle_ft.engine.batch_copies import to_device
from paddle_ft.engine.evaluate import embed_rows
from paddle_ft.engine.objectives.classification import Classification
from paddle_ft.engine.prototypes import class_means


def repeated(features: Features, times: int) -> Features:
    """The rows `times` over (one epoch = `times` passes, so a few rows meet many partners per epoch)."""
    labels = None if features.labels is None else np.concatenate([features.labels] * times)
    return Features(features.input_ids * times, features.token_type_ids * times, labels)


@dataclass(frozen=True)
class ContrastivePairs(Classification):
    """Loss: every two rows of a batch form a pair, their cosine pulled to 1 (same class) or 0 (different), as
    SetFit's CosineSimilarityLoss; positive and negative pairs weigh half each, whatever their counts (a batch of
    many classes is mostly negative pairs). Before the model is scored or saved, its prototypes become the class
    means of the training rows (`prepare`)."""

    rows: Features | None = None
    """The training rows once each (the loss sees them repeated), whose class means are the prototypes."""
    batch_size: int = 64

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        batch = pad_batch(features, indices, self.pad_token_id)
        with autocast():
            vectors = model(to_device(batch["input_ids"]), to_device(batch["token_type_ids"]),
                            vectors=True)
        unit = paddle.nn.functional.normalize(vectors.astype("float32"), axis=-1)  # [b, hidden]
        cosine = paddle.matmul(unit, unit, transpose_y=True)  # [b, b]
        positive, negative = _pair_masks(features, indices, batch["labels"])
        error = (cosine - to_device(positive.astype(np.float32))) ** 2
        terms = [(error * to_device(mask.astype(np.float32))).sum() / float(mask.sum())
                 for mask in (positive, negative) if mask.any()]
        if not terms:  # one row, or copies of one text: no pair to learn from
            return (cosine * 0.0).sum()
        return paddle.add_n(terms) / len(terms) * len(indices)  # the engine divides by the examples

    def prepare(self, model, autocast) -> None:
        vectors = embed_rows(model, self.rows, self.batch_size, self.pad_token_id, autocast)
        model.classifier.set_prototypes(class_means(vectors, self.rows.labels, len(self.label_names)))


def _pair_masks(features: Features, indices: list[int], labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[b, b] bool masks of the pairs to learn from, each pair once: same class, different class. A row is no pair
    with itself, nor with a copy of its own text (the repetition puts copies in one batch)."""
    texts = [features.input_ids[i].tobytes() for i in indices]
    distinct = np.array([[a != b for b in texts] for a in texts])
    upper = np.triu(np.ones((len(indices), len(indices)), dtype=bool), k=1) & distinct
    same = labels[:, None] == labels[None, :]
    return upper & same, upper & ~same
