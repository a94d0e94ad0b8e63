"""A WordPiece vocabulary for an encoder trained from scratch: the demo's, and the one `init` writes from a user's
training text."""
from __future__ import annotations

import string
from collections import Counter

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def character_vocab(texts: list[str], min_count: int = 2) -> list[str]:
    """WordPiece vocab for a character-level BERT: special tokens, ASCII letters and digits (also as
    `##` continuations, since the tokenizer keeps runs of them as one word), then every other
    character seen at least `min_count` times, most frequent first."""
    ascii_pieces = list(string.ascii_lowercase + string.digits)
    counts = Counter(ch for text in texts for ch in text.lower() if not ch.isspace())
    others = [ch for ch, n in counts.most_common() if n >= min_count and ch not in ascii_pieces]
    return [*SPECIAL_TOKENS, *ascii_pieces, *("##" + p for p in ascii_pieces), *others]
