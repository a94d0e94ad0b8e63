"""Scoring a classifier on tokenised features: logits, probabilities, the classification report.

Imported by the training objectives and by the `eval` command alike; it imports nothing of the loop, its
checkpoints or its collectives.
"""
from __future__ import annotations

import contextlib

import numpy as np
import paddle

from paddle_ft.data.features import Features, eval_batches, pad_batch
from paddle_ft.engine.metrics import (classification_report, decision_report, expected_calibration_error,
                                      multi_label_report, with_levels)
from paddle_ft.errors import UserError
from paddle_ft.text import sigmoid, softmax


class NonFiniteScores(UserError):
    """The model's outputs are NaN/inf: its weights are not finite, and it must not be reported as scoring."""


@paddle.no_grad()
def predict_logits(model, features: Features, batch_size: int, pad_token_id: int,
                   subset: np.ndarray | None = None, autocast=contextlib.nullcontext, on_batch=None) -> np.ndarray:
    """Logits [n, num_classes] of the rows of `features` (or of the rows in `subset`), in order, computed
    under `autocast()` (training's precision); `on_batch(rows)` after each batch (progress)."""
    return _finite(_rows_through(model, model, model.classifier.weight.shape[1], features, batch_size, pad_token_id,
                                 subset, autocast, on_batch))


@paddle.no_grad()
def embed_rows(model, features: Features, batch_size: int, pad_token_id: int,
               autocast=contextlib.nullcontext) -> np.ndarray:
    """The vector the head reads of every row [n, hidden] float32 (`model.embed`), unit length: what a prototype
    head compares."""
    vectors = _rows_through(model, model.embed, model.encoder.config.hidden_size, features, batch_size, pad_token_id,
                            None, autocast, None)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


@paddle.no_grad()
def logits_and_vectors(model, features: Features, batch_size: int, pad_token_id: int,
                       on_batch=None) -> tuple[np.ndarray, np.ndarray]:
    """(logits [n, num_classes], the head's input vectors [n, hidden], not normalised) of every row, from one pass
    through the encoder: what needs both (select-texts' diverse strategy) pays for one forward, not two."""
    hidden = model.encoder.config.hidden_size

    def both(input_ids, token_type_ids):
        pooled = model.embed(input_ids, token_type_ids)
        return paddle.concat([model.classifier(model.dropout(pooled)).astype(pooled.dtype), pooled], axis=-1)

    out = _rows_through(model, both, model.classifier.weight.shape[1] + hidden, features, batch_size, pad_token_id,
                        None, contextlib.nullcontext, on_batch)
    return _finite(out[:, :-hidden]), out[:, -hidden:]


def _finite(logits: np.ndarray) -> np.ndarray:
    """`logits`, refused where NaN weights made them NaN/inf: those score "accuracy" by chance, never a result."""
    if not np.isfinite(logits).all():
        raise NonFiniteScores("the model's scores are NaN/inf: its weights are not finite (training diverged); "
                              "retrain with a lower train.optimizer.learning_rate, or use an earlier checkpoint")
    return logits


def _rows_through(model, forward, width: int, features: Features, batch_size: int, pad_token_id: int, subset,
                  autocast, on_batch) -> np.ndarray:
    """`forward(input_ids, token_type_ids)` -> [batch, width] over the rows (of `subset`), in order, with `model` in
    eval mode, batched by length."""
    model.eval()
    subset = np.arange(len(features)) if subset is None else np.asarray(subset)
    out = np.zeros((len(subset), width), dtype=np.float32)
    for positions in eval_batches(features.lengths[subset], batch_size):
        batch = pad_batch(features, subset[positions].tolist(), pad_token_id)
        with autocast():
            rows = forward(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
        out[positions] = rows.astype("float32").numpy()  # [batch, width]
        if on_batch is not None:
            on_batch(len(positions))
    return out


def text_probabilities(features: Features, logits: np.ndarray) -> np.ndarray:
    """Softmax probabilities [texts, num_classes] from every row's logits: a text's windows pooled first."""
    return softmax(features.pool(logits))


def predict_probabilities(model, features: Features, batch_size: int, pad_token_id: int,
                          autocast=contextlib.nullcontext) -> np.ndarray:
    """Softmax probabilities [texts, num_classes] of `features`, in order."""
    return text_probabilities(features, predict_logits(model, features, batch_size, pad_token_id, autocast=autocast))


def evaluate(model, features: Features, batch_size: int, pad_token_id: int, label_names: tuple[str, ...],
             autocast=contextlib.nullcontext, thresholds: tuple[float, ...] | None = None,
             temperature: float = 1.0, on_batch=None, abstain_below: float | None = None,
             hierarchy=None) -> tuple[dict, np.ndarray]:
    """(classification report, probabilities) of `model` on labelled `features`, one row per text: the softmax
    of the logits / `temperature` (and under `abstain_below` what abstaining does: the decision report); with
    `thresholds`, of a multi-label model (a sigmoid per label, predicted at or above its threshold)."""
    logits = features.pool(predict_logits(model, features, batch_size, pad_token_id, autocast=autocast,
                                          on_batch=on_batch))
    if thresholds is None:
        probs, gold = softmax(logits if temperature == 1 else logits / temperature), features.document_labels
        del logits  # of 20,000 labels, gigabytes
        report = classification_report(gold, probs.argmax(axis=1), label_names)
        decision = decision_report(probs, gold, abstain_below)
        report = {**report, "ece": expected_calibration_error(probs, gold), "decision": decision}
        return with_levels(report, hierarchy, gold, probs, abstain_below), probs
    probs = sigmoid(logits)
    chosen = probs >= np.asarray(thresholds)
    report = multi_label_report(features.document_labels, chosen, label_names)
    report = with_levels(report, hierarchy, features.document_labels, chosen)
    return {**report, "thresholds": dict(zip(label_names, thresholds))}, probs
