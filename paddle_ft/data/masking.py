"""Masked-language-model inputs: which tokens to predict, and what the encoder sees in their place.

BERT's recipe: of the tokens that may be masked (never [CLS], [SEP] or padding), a `rate` share is chosen
(rounded, at least one); of those, 80% become [MASK], 10% a random token, 10% stay as they are, and the model
predicts the original of every chosen token. With word groups (whole-word masking, as the Chinese wwm models
are trained), whole words are chosen until the share is reached, so a word is never half-masked.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Vocabulary:
    """What masking needs to know of a tokenizer."""

    size: int
    mask_id: int
    special_ids: frozenset[int]
    """Never chosen for prediction, and never drawn as a random replacement."""
    specials: np.ndarray = field(init=False, repr=False, compare=False)
    ordinary: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "specials", np.fromiter(sorted(self.special_ids), dtype=np.int64))
        object.__setattr__(self, "ordinary", np.setdiff1d(np.arange(self.size), self.specials))

    def random_tokens(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return rng.choice(self.ordinary, size=count)


def mask_example(ids: np.ndarray, vocabulary: Vocabulary, rng: np.random.Generator, rate: float = 0.15,
                 word_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the ids the encoder sees, the positions to predict) of one example; the targets are `ids[positions]`.
    `word_ids` gives each token's word (-1 for specials); without it every token is its own word."""
    candidates = np.flatnonzero(~np.isin(ids, vocabulary.specials))
    if len(candidates) == 0:
        return ids.copy(), candidates
    wanted = max(1, int(round(rate * len(candidates))))
    if word_ids is None:
        positions = np.sort(rng.choice(candidates, size=wanted, replace=False))
    else:
        positions = _whole_words(candidates, word_ids, wanted, rng)
    seen = ids.copy()
    draw = rng.random(len(positions))
    seen[positions[draw < 0.8]] = vocabulary.mask_id
    replaced = positions[(draw >= 0.8) & (draw < 0.9)]
    seen[replaced] = vocabulary.random_tokens(rng, len(replaced))
    return seen, positions


def _whole_words(candidates: np.ndarray, word_ids: np.ndarray, wanted: int, rng: np.random.Generator) -> np.ndarray:
    """Words in random order, taken whole while they fit in `wanted` tokens (a first word always)."""
    words = np.unique(word_ids[candidates])
    chosen: list[np.ndarray] = []
    taken = 0
    for word in rng.permutation(words):
        members = candidates[word_ids[candidates] == word]
        if taken and taken + len(members) > wanted:
            continue
        chosen.append(members)
        taken += len(members)
        if taken >= wanted:
            break
    return np.sort(np.concatenate(chosen))


def word_ids_of(word_token_counts: list[int], length: int) -> np.ndarray:
    """Per token of `[CLS] tokens... [SEP]` (cut to `length`), the index of its word; -1 for the specials."""
    groups = np.repeat(np.arange(len(word_token_counts)), word_token_counts)[:length - 2]
    return np.concatenate([[-1], groups, [-1]]).astype(np.int64)
