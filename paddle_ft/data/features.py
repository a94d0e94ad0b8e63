"""Tokenised features, dynamic padding and the training batch order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from paddle_ft.data.labels import LabelMap
from paddle_ft.data.readers import Example

CHARACTERS_PER_TOKEN = 16
"""Characters of a text read per token it can keep (`Truncation.characters_read`)."""


@dataclass(frozen=True)
class Truncation:
    """Which tokens of a single text longer than `max_length` are kept ([CLS] and [SEP] always are): the
    first (head), the last (tail), or the first `head_tokens` and the last of the rest (head_tail, which
    Sun et al. 2019 found best for long documents); or every token, in windows of `max_length` that start
    `stride` tokens apart and whose logits are pooled (`window_pooling` mean or max) into one answer
    (sliding_window). Text pairs are always cut longest-first."""

    mode: str = "head"
    head_tokens: int = 64
    stride: int = 64
    window_pooling: str = "mean"

    def apply(self, texts_ids: list[list[int]], max_length: int) -> tuple[list[list[int]], np.ndarray | None]:
        """(the rows the model sees, the text each row belongs to): a row per text, documents None; with
        sliding_window a row per window, documents [rows] (0, 0, 1, 2, 2, 2, ...)."""
        rows = [self.windows(ids, max_length) for ids in texts_ids]
        flat = [window for windows in rows for window in windows]
        if self.mode != "sliding_window":
            return flat, None
        return flat, np.repeat(np.arange(len(rows)), [len(windows) for windows in rows])

    def windows(self, ids: list[int], max_length: int) -> list[list[int]]:
        """The rows the model sees for one text: one, unless sliding_window cuts a long text into several."""
        if self.mode != "sliding_window" or len(ids) <= max_length:
            return [self.cut(ids, max_length)]
        body, inner = max_length - 2, ids[1:-1]
        step = min(self.stride, body)  # a wider step would skip the tokens between two windows
        return [[ids[0], *inner[start:start + body], ids[-1]] for start in range(0, len(inner) - body + step, step)]

    def characters_read(self, text: str, max_length: int) -> str:
        """The part of `text` its kept tokens come from, cut before tokenising: a token covers at least one
        character, so past CHARACTERS_PER_TOKEN per kept token the rest is never read, and a line of millions of
        characters costs what a line of a few thousand does. (Only more blanks than that between tokens could
        leave fewer tokens than max_length.) Sliding windows read every character."""
        reach = max_length * CHARACTERS_PER_TOKEN
        if self.mode == "sliding_window" or len(text) <= reach * (2 if self.mode == "head_tail" else 1):
            return text
        if self.mode == "head":
            return text[:reach]
        if self.mode == "tail":
            return text[-reach:]
        return text[:reach] + text[-reach:]

    def cut(self, ids: list[int], max_length: int) -> list[int]:
        if len(ids) <= max_length:
            return ids
        body, inner = max_length - 2, ids[1:-1]
        if self.mode == "head":
            kept = inner[:body]
        elif self.mode == "tail":
            kept = inner[len(inner) - body:]
        else:
            kept = inner[:self.head_tokens] + inner[len(inner) - (body - self.head_tokens):]
        return [ids[0], *kept, ids[-1]]


@dataclass
class Features:
    """Token ids of each example (unpadded, variable length) and its class id."""

    input_ids: list[np.ndarray]       # each [seq] int64
    token_type_ids: list[np.ndarray]  # each [seq] int64
    labels: np.ndarray | None         # [n] int64 (multi-label: [n, labels] float32 0/1), None for unlabelled input
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


def pool_windows(logits: np.ndarray, documents: np.ndarray, how: str) -> np.ndarray:
    """[rows, classes] logits of windows -> [texts, classes]: the mean (or max) over each text's windows;
    `documents` [rows] says which text each row is a window of (0, 0, 1, 2, 2, 2, ...)."""
    count = int(documents.max()) + 1
    if how == "max":
        pooled = np.full((count, logits.shape[1]), -np.inf, dtype=logits.dtype)
        np.maximum.at(pooled, documents, logits)
        return pooled
    pooled = np.zeros((count, logits.shape[1]), dtype=logits.dtype)
    np.add.at(pooled, documents, logits)
    return pooled / np.bincount(documents, minlength=count)[:, None].astype(logits.dtype)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Each label's own probability (multi-label), without overflow for large negative logits."""
    return np.exp(-np.logaddexp(0.0, -logits)).astype(logits.dtype)


def label_ids(examples: Sequence[Example], label_map: LabelMap | None) -> np.ndarray | None:
    """Class id of each example [n] int64, or for multi-label rows a 0/1 row per example [n, labels] float32;
    None for unlabelled input."""
    if label_map is None:
        return None
    if examples and isinstance(examples[0].label, tuple):
        multi_hot = np.zeros((len(examples), len(label_map)), dtype=np.float32)
        for row, example in enumerate(examples):
            multi_hot[row, [label_map.id(name) for name in example.label]] = 1.0
        return multi_hot
    return np.array([label_map.id(e.label) for e in examples], dtype=np.int64)


def pad_batch(features: Features, indices: Sequence[int], pad_token_id: int) -> dict[str, np.ndarray]:
    """Pad the chosen examples to the longest of them (dynamic padding)."""
    input_ids, token_type_ids = pad_ids([features.input_ids[i] for i in indices],
                                        [features.token_type_ids[i] for i in indices], pad_token_id)
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    if features.labels is not None:
        batch["labels"] = features.labels[list(indices)]  # [batch]
    return batch


def pad_ids(ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]],
            pad_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and segment ids of texts, padded to the longest of them: ([batch, seq], [batch, seq]) int64."""
    width = max(len(x) for x in ids)
    input_ids = np.full((len(ids), width), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((len(ids), width), dtype=np.int64)
    for row, (x, t) in enumerate(zip(ids, types)):
        input_ids[row, :len(x)] = x
        token_type_ids[row, :len(t)] = t
    return input_ids, token_type_ids


class TrainBatchSampler:
    """Shuffled training batches, reshuffled each epoch from (seed, epoch).

    With `group_by_length`, the shuffled order is cut into chunks of `batch_size * chunk_batches`
    examples and each chunk is sorted by length before it is cut into batches; the batch order is then
    shuffled. Every example is still seen exactly once per epoch, but a batch holds texts of similar
    length, so dynamic padding adds few pad tokens.

    Under several ranks each takes a share of every batch, and none may get an empty one: the epoch's partial
    batch is left out when it holds fewer than `min_batch` (the number of ranks) examples, so at most
    min_batch - 1 examples sit out an epoch (other ones in the next, which is shuffled anew).
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, group_by_length: bool = True,
                 chunk_batches: int = 64, min_batch: int = 1):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.group_by_length = group_by_length
        self.chunk_batches = chunk_batches
        self.min_batch = min_batch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return batches_per_epoch(len(self.lengths), self.batch_size, self.min_batch)

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        if not self.group_by_length:
            return iter(self._big_enough(_cut(order, self.batch_size)))
        chunk = self.batch_size * self.chunk_batches
        batches = []
        for start in range(0, len(order), chunk):
            part = order[start:start + chunk]
            part = part[np.argsort(-self.lengths[part], kind="stable")]
            batches.extend(_cut(part, self.batch_size))
        # left out before the shuffle, which so draws as it always did when no batch is left out
        batches = self._big_enough(batches)
        return iter([batches[i] for i in rng.permutation(len(batches))])

    def _big_enough(self, batches: list[list[int]]) -> list[list[int]]:
        return [batch for batch in batches if len(batch) >= self.min_batch]


def batches_per_epoch(examples: int, batch_size: int, min_batch: int = 1) -> int:
    """How many batches TrainBatchSampler cuts an epoch into: the full ones, and the partial one if it holds at
    least `min_batch` examples."""
    full, rest = divmod(examples, batch_size)
    return full + (rest >= max(min_batch, 1))


def micro_batches(step_batch: list[int], batch_size: int, rank: int = 0,
                  world_size: int = 1) -> tuple[list[list[int]], int]:
    """This rank's micro-batches of one optimizer step's examples.

    The step batch is cut into pieces of `batch_size * world_size` (one per accumulation micro-step)
    and each rank takes every world_size-th example of a piece, so lengths stay balanced. A piece
    with fewer examples than ranks (only possible in the epoch's partial step batch) is dropped, so that
    no rank gets an empty batch; TrainBatchSampler(min_batch=world_size) makes no step batch that would
    be left with no piece. Returns (this rank's micro-batches, examples used by all ranks).
    """
    width = batch_size * world_size
    pieces = [step_batch[i:i + width] for i in range(0, len(step_batch), width)]
    kept = [piece for piece in pieces if len(piece) >= world_size]
    return [piece[rank::world_size] for piece in kept], sum(len(piece) for piece in kept)


def eval_batches(lengths: np.ndarray, batch_size: int) -> list[list[int]]:
    """Batches for inference: examples sorted by length so each batch pads little."""
    return _cut(np.argsort(-np.asarray(lengths), kind="stable"), batch_size)


def _cut(order: np.ndarray, batch_size: int) -> list[list[int]]:
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
