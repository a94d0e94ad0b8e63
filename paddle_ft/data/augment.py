"""Training-set augmentation by EDA's edits (Wei & Zou, 2019) that work offline: swap, delete and insert
characters. (Synonym replacement needs a synonym dictionary, which PaddleNLP's `dataaug` downloads: not
available offline, so it is not offered.) Characters, not words: a Chinese text is read character by character by
the demo's vocabulary, and it needs no segmenter. Every edit is drawn from (seed, row, copy): the same config makes
the same rows."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from paddle_ft.config import AugmentConfig
from paddle_ft.data.readers import Example


def augmented(rows: list[Example], settings: AugmentConfig, seed: int) -> list[Example]:
    """`settings.copies` edited copies of each row (pairs: the first text only), after the originals' order."""
    extra = []
    for copy in range(settings.copies):
        for index, row in enumerate(rows):
            rng = np.random.default_rng([seed, 3, copy, index])
            operation = settings.operations[rng.integers(len(settings.operations))]
            text = _EDITS[operation](list(row.text), rng, settings.rate)
            if text.strip() and text != row.text:
                extra.append(replace(row, text=text))
    return extra


def _count(chars: list[str], rate: float) -> int:
    return max(1, int(round(rate * len(chars))))


def _swap(chars: list[str], rng, rate: float) -> str:
    for _ in range(_count(chars, rate)):
        if len(chars) > 1:
            i, j = rng.choice(len(chars), size=2, replace=False)
            chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)


def _delete(chars: list[str], rng, rate: float) -> str:
    if len(chars) < 2:
        return "".join(chars)
    gone = set(rng.choice(len(chars), size=min(_count(chars, rate), len(chars) - 1), replace=False).tolist())
    return "".join(c for i, c in enumerate(chars) if i not in gone)


def _insert(chars: list[str], rng, rate: float) -> str:
    for _ in range(_count(chars, rate)):
        chars.insert(int(rng.integers(len(chars) + 1)), chars[rng.integers(len(chars))])
    return "".join(chars)


_EDITS = {"swap": _swap, "delete": _delete, "insert": _insert}
