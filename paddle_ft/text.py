"""What training and inference both need to read a text the same way, and nothing else: the truncation rule
(including sliding windows and their pooling), padding, softmax/sigmoid, and the choice lists a model's metadata is
checked against. It imports neither the config nor the data readers, so the inference side can use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

TASKS = ("single_label", "multi_label")
POOLINGS = ("pooler", "cls", "mean")
HEADS = ("linear", "prototype")
TRUNCATIONS = ("head", "tail", "head_tail", "sliding_window")  # what becomes of a text longer than max_length
WINDOW_POOLINGS = ("mean", "max")

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

    @classmethod
    def of(cls, settings) -> Truncation:
        """The rule `settings` describe: a config's `data` section or a model's metadata, which both name its parts
        `truncation`, `head_tokens`, `stride` and `window_pooling`."""
        return cls(settings.truncation, settings.head_tokens, settings.stride, settings.window_pooling)

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

    def tokens_read(self, characters: int, max_length: int) -> int:
        """About how many tokens the model reads of a text of `characters` characters (its cost to a batch): a
        character is taken for a token (as a Chinese one is; a word of letters is fewer, so this errs high), [CLS]
        and [SEP] added, cut to max_length, and with sliding_window every window counted at max_length."""
        tokens = characters + 2
        if self.mode != "sliding_window" or tokens <= max_length:
            return min(tokens, max_length)
        body = max_length - 2
        step = min(self.stride, body)
        return (1 + -(-(characters - body) // step)) * max_length

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
    """Along the last axis; one array the size of `logits` is made (of 20,000 labels a copy is gigabytes)."""
    out = logits - logits.max(axis=-1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)
    return out


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Each label's own probability (multi-label), without overflow for large negative logits."""
    out = np.array(logits, dtype=np.result_type(logits, np.float32))  # the one array made, as in softmax
    np.negative(out, out=out)
    np.logaddexp(out.dtype.type(0), out, out=out)
    np.negative(out, out=out)
    return np.exp(out, out=out)


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
