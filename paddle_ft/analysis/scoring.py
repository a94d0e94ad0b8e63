"""A trained model's answers on texts nobody has labelled: the probabilities it answers with (calibrated as saved)
and, for choosing among them, the vectors its head reads. What `export-tasks` pre-annotates and `select` ranks."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paddle_ft.artifacts.bundle import Bundle
from paddle_ft.data.features import tokenize
from paddle_ft.data.readers import Example
from paddle_ft.engine.evaluate import logits_and_vectors, predict_logits
from paddle_ft.text import sigmoid, softmax
from paddle_ft.tokenization import fastest


@dataclass(frozen=True)
class Scores:
    probabilities: np.ndarray
    """[texts, classes]: a single-label model's softmax of logits / its temperature; a multi-label model's sigmoid
    per label."""
    vectors: np.ndarray | None
    """[texts, hidden] unit vectors the head reads (a long text's windows averaged), when asked for."""


def score_texts(bundle: Bundle, examples: list[Example], batch_size: int, with_vectors: bool = False,
                on_batch=None) -> Scores:
    meta, tokenizer = bundle.meta, fastest(bundle.tokenizer)
    features = tokenize(examples, tokenizer, meta.max_length, None, meta.truncation_rule)
    vectors = None
    if with_vectors:  # one pass through the encoder for both
        rows, raw = logits_and_vectors(bundle.model, features, batch_size, tokenizer.pad_token_id, on_batch)
        pooled = raw if features.documents is None else _mean_windows(raw, features.documents)
        vectors = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    else:
        rows = predict_logits(bundle.model, features, batch_size, tokenizer.pad_token_id, on_batch=on_batch)
    logits = features.pool(rows)
    probabilities = sigmoid(logits) if meta.multi_label else softmax(logits / meta.temperature)
    return Scores(probabilities, vectors)


def _mean_windows(rows: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """[windows, hidden] -> [texts, hidden]: the mean of each text's windows (a vector is pooled by mean whatever
    the logits' window_pooling)."""
    sums = np.zeros((int(documents.max()) + 1, rows.shape[1]), dtype=np.float64)
    np.add.at(sums, documents, rows)
    return (sums / np.bincount(documents)[:, None]).astype(np.float32)


def answers(probabilities: np.ndarray, label_names: tuple[str, ...], thresholds: tuple[float, ...] | None
            ) -> list[tuple[tuple[str, ...], float]]:
    """(the labels the model answers, how sure it is) per text: the top label and its probability; with
    `thresholds` (multi-label) the labels at or above theirs and the lowest probability among them, or the highest
    of all when none is."""
    if thresholds is None:
        return [((label_names[i],), float(row[i])) for i, row in zip(probabilities.argmax(axis=1), probabilities)]
    chosen = probabilities >= np.asarray(thresholds)
    return [(tuple(n for n, c in zip(label_names, row_chosen) if c),
             float(row[row_chosen].min()) if row_chosen.any() else float(row.max()))
            for row, row_chosen in zip(probabilities, chosen)]
