"""Tokenised features and dynamic padding."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from paddle_ft.data.labels import LabelMap
from paddle_ft.data.readers import Example
from paddle_ft.text import Truncation, pad_ids, pool_windows


@dataclass
class Features:
    """Token ids of each example (unpadded, variable length) and its class id."""

    input_ids: list[np.ndarray]       # each [seq] int64
    token_type_ids: list[np.ndarray]  # each [seq] int64
    labels: np.ndarray | None         # [n] int64 (multi-label: [n, labels] bool), None for unlabelled input
    word_ids: list[np.ndarray] | None = None  # each [seq]: the word of each token, for whole-word masking
    documents: np.ndarray | None = None  # [n]: the text each row is a window of (sliding_window); None = row i
    window_pooling: str = "mean"  # how the windows' logits become their text's

    @property
    def document_labels(self) -> np.ndarray | None:
        """The class id (multi-label: the 0/1 row) of each text (of each row when there are no windows)."""
        if self.labels is None or self.documents is None:
            return self.labels
        return self.labels[np.unique(self.documents, return_index=True)[1]]

    def pool(self, logits: np.ndarray) -> np.ndarray:
        """[rows, classes] -> [texts, classes]: each text's windows pooled."""
        return logits if self.documents is None else pool_windows(logits, self.documents, self.window_pooling)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(ids) for ids in self.input_ids), dtype=np.int64, count=len(self))


@dataclass
class Splits:
    """The tokenised splits of a run, with what batching and naming them takes."""

    label_names: tuple[str, ...]
    """Class id -> label name."""
    pad_token_id: int
    train: Features
    dev: Features | None = None
    test: Features | None = None


def tokenize(examples: Sequence[Example], tokenizer, max_length: int,
             label_map: LabelMap | None = None, truncation: Truncation = Truncation()) -> Features:
    pairs = [e.text_pair for e in examples] if examples and examples[0].text_pair is not None else None
    reads = Truncation() if pairs is not None else truncation  # a pair is cut longest-first: each keeps its head
    texts = [reads.characters_read(e.text, max_length) for e in examples]
    if pairs is not None:
        pairs = [reads.characters_read(pair, max_length) for pair in pairs]
    labels = label_ids(examples, label_map)
    if truncation.mode == "head" or pairs is not None:
        encoded = tokenizer(texts, text_pair=pairs, max_length=max_length, truncation=True)
        ids, types = encoded["input_ids"], encoded["token_type_ids"]
        return Features([np.asarray(x, dtype=np.int64) for x in ids], [np.asarray(t, dtype=np.int64) for t in types],
                        labels)
    # whole, then cut (or cut into windows) where the rule says; a single text's token types are all 0
    rows, documents = truncation.apply(tokenizer(texts, max_length=None, truncation=False)["input_ids"], max_length)
    ids = [np.asarray(row, dtype=np.int64) for row in rows]
    if documents is not None and labels is not None:
        labels = labels[documents]  # every window of a text is a row carrying the text's label
    return Features(ids, [np.zeros_like(x) for x in ids], labels, documents=documents,
                    window_pooling=truncation.window_pooling)


def label_ids(examples: Sequence[Example], label_map: LabelMap | None) -> np.ndarray | None:
    """Class id of each example [n] int64, or for multi-label rows a row of flags per example [n, labels] bool
    (a byte each: 80,000 rows of 20,000 labels in float32 were 6.4 GB); None for unlabelled input."""
    if label_map is None:
        return None
    if examples and isinstance(examples[0].label, tuple):
        multi_hot = np.zeros((len(examples), len(label_map)), dtype=bool)
        for row, example in enumerate(examples):
            multi_hot[row, [label_map.id(name) for name in example.label]] = True
        return multi_hot
    return np.array([label_map.id(e.label) for e in examples], dtype=np.int64)


def pad_batch(features: Features, indices: Sequence[int], pad_token_id: int) -> dict[str, np.ndarray]:
    """Pad the chosen examples to the longest of them (dynamic padding)."""
    input_ids, token_type_ids = pad_ids([features.input_ids[i] for i in indices],
                                        [features.token_type_ids[i] for i in indices], pad_token_id)
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    if features.labels is not None:
        labels = features.labels[list(indices)]  # [batch] (multi-label: [batch, labels], the loss's float32)
        batch["labels"] = labels.astype(np.float32) if labels.dtype == bool else labels
    return batch


def pack_batch(features: Features, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """The chosen examples side by side in one row with no padding (train.runtime.packed_batches): input_ids,
    token_type_ids and position_ids [1, tokens], each text's positions from 0; offsets [texts + 1], where each text
    starts, then the total; labels as pad_batch gives them."""
    ids = [np.asarray(features.input_ids[i]) for i in indices]
    lengths = np.array([len(row) for row in ids], dtype=np.int64)
    batch = {"input_ids": np.concatenate(ids)[None].astype(np.int64),
             "token_type_ids": np.concatenate([np.asarray(features.token_type_ids[i]) for i in indices])[None]
             .astype(np.int64),
             "position_ids": np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])[None],
             "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)}
    if features.labels is not None:
        labels = features.labels[list(indices)]
        batch["labels"] = labels.astype(np.float32) if labels.dtype == bool else labels
    return batch


def eval_batches(lengths: np.ndarray, batch_size: int) -> list[list[int]]:
    """Batches for inference: examples sorted by length so each batch pads little."""
    return cut_batches(np.argsort(-np.asarray(lengths), kind="stable"), batch_size)


def cut_batches(order: np.ndarray, batch_size: int) -> list[list[int]]:
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
