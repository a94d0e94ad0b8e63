"""A Rust tokenizer (Hugging Face `tokenizers`) that gives exactly the ids of PaddleNLP's Python
BERT-style tokenizers, about 5x faster.

PaddleNLP's own fast tokenizer needs the `fast-tokenizer-python` package, which has no wheel for
current Pythons, so the well-kept `tokenizers` library is used with the same vocabulary and the same
rules (clean text, split CJK characters, lower-case and strip accents, split punctuation, WordPiece,
longest-first truncation). Tests compare the ids on the whole demo corpus and on awkward inputs.
"""
from __future__ import annotations

import functools
import sys
import unicodedata
from typing import Sequence

# paddlenlp.transformers.tokenizer_utils: _is_punctuation (ASCII non-alphanumerics, Unicode P*) or
# _is_symbol (Unicode S* and a few listed code points)
_PUNCTUATION_OR_SYMBOL = r"!-/:-@\[-`{-~\p{P}\p{S}\x{00AD}\x{00B2}\x{00BA}\x{3007}\x{00B5}\x{00D8}\x{014B}\x{01B1}"
# CJK Extension E's first 256 code points: PaddleNLP splits them off as Chinese characters, `tokenizers`'
# BertNormalizer starts that range at U+2B920 instead of U+2B820 (found by Hypothesis): isolate them here
_CJK_MISSED_BY_TOKENIZERS = r"\x{2B820}-\x{2B91F}"


@functools.lru_cache(maxsize=2)
def _dropped_characters(strip_accents: bool) -> str:
    """A regex class of the characters PaddleNLP's BERT tokenizer drops, by the categories of Python's own
    Unicode tables: every C* character but tabs and line breaks (clean_text) and, when it strips accents,
    every Mn (non-spacing mark). `tokenizers` decides by its own, older tables and keeps characters they do
    not know as [UNK]; Hypothesis found U+18D09 (unassigned) and U+08CA (a mark new in Unicode 14).
    Removing them first makes both tokenizers agree whatever Unicode version each was built with."""
    def dropped(code: int) -> bool:
        category = unicodedata.category(chr(code))
        return (category[0] == "C" and chr(code) not in "\t\n\r") or (strip_accents and category == "Mn")

    ranges, start = [], None
    for code in range(sys.maxunicode + 2):
        drop = code <= sys.maxunicode and dropped(code)
        if drop and start is None:
            start = code
        elif not drop and start is not None:
            ranges.append(f"\\x{{{start:X}}}-\\x{{{code - 1:X}}}")
            start = None
    return f"[{''.join(ranges)}]"


class FastBertTokenizer:
    """Encodes like the PaddleNLP tokenizer it was built from; everything else is delegated to it.
    One instance is not meant to be shared by threads that encode with different max_lengths (the
    backend's truncation setting is switched per call)."""

    def __init__(self, slow, backend):
        self.slow, self._backend, self._truncation = slow, backend, None

    def __len__(self) -> int:  # dunder methods are looked up on the class, not through __getattr__
        return len(self.slow)

    def __getattr__(self, name):  # pad_token_id, vocab, save_pretrained, ...
        if name in ("slow", "_backend", "_truncation") or name.startswith("__"):
            raise AttributeError(name)  # not set yet (copy, unpickling): no recursion through self.slow
        return getattr(self.slow, name)

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
               max_length: int | None = None) -> tuple[list[list[int]], list[list[int]], list[bool]]:
        """(input_ids, token_type_ids, truncated) per text, with [CLS]/[SEP], cut to `max_length`."""
        if pairs is not None:
            return self._encode_pairs(texts, pairs, max_length)
        self._truncate_at(max_length)
        encodings = self._backend.encode_batch(list(texts))
        return ([e.ids for e in encodings], [e.type_ids for e in encodings],
                [bool(e.overflowing) for e in encodings])

    def encode_with_offsets(self, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], list[list]]:
        """(input_ids, (start, end) character span of each token in its text) per text, cut to `max_length`;
        the specials' spans are (0, 0)."""
        self._truncate_at(max_length)
        encodings = self._backend.encode_batch(list(texts))
        return [e.ids for e in encodings], [e.offsets for e in encodings]

    def _truncate_at(self, max_length: int | None) -> None:
        if max_length != self._truncation:
            if max_length is None:
                self._backend.no_truncation()
            else:
                self._backend.enable_truncation(max_length, strategy="longest_first")
            self._truncation = max_length

    def _encode_pairs(self, texts, pairs, max_length):
        """Pairs are truncated here, because `tokenizers` gives an odd leftover token to the second text
        and PaddleNLP to the first."""
        if self._truncation is not None:
            self._backend.no_truncation()
            self._truncation = None
        firsts = self._backend.encode_batch(list(texts), add_special_tokens=False)
        seconds = self._backend.encode_batch(list(pairs), add_special_tokens=False)
        cls, sep = self.slow.cls_token_id, self.slow.sep_token_id
        ids, types, truncated = [], [], []
        for first, second in zip(firsts, seconds):
            a, b = first.ids, second.ids
            keep_a, keep_b = _longest_first(len(a), len(b), None if max_length is None else max_length - 3)
            ids.append([cls, *a[:keep_a], sep, *b[:keep_b], sep])
            types.append([0] * (keep_a + 2) + [1] * (keep_b + 1))
            truncated.append(keep_a < len(a) or keep_b < len(b))
        return ids, types, truncated

    def __call__(self, texts, text_pair=None, max_length: int | None = None, truncation: bool = True) -> dict:
        """The subset of PaddleNLP's call that paddle_ft uses: a batch of texts (and pairs)."""
        ids, types, _ = self.encode(texts, text_pair, max_length if truncation else None)
        return {"input_ids": ids, "token_type_ids": types}


def _longest_first(len_a: int, len_b: int, budget: int | None) -> tuple[int, int]:
    """Tokens kept of each text by PaddleNLP's longest_first rule (drop one token from the longer
    text until both fit; on a tie, from the second), in closed form."""
    if budget is None or len_a + len_b <= budget:
        return len_a, len_b
    budget = max(budget, 0)
    if 2 * min(len_a, len_b) >= budget:  # both end up cut to about half
        return (budget + 1) // 2, budget // 2
    return (len_a, budget - len_a) if len_a < len_b else (budget - len_b, len_b)


def fast_tokenizer_for(tokenizer) -> FastBertTokenizer | None:
    """The fast equivalent of a PaddleNLP BERT / ERNIE / RoBERTa-Chinese tokenizer, or None when
    `tokenizer` is of another kind (or `tokenizers` is missing): callers then use it as it is."""
    try:
        from paddlenlp.transformers import BertTokenizer, ErnieTokenizer, RobertaChineseTokenizer
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
    except ImportError:
        return None
    if isinstance(tokenizer, FastBertTokenizer):
        return tokenizer
    if type(tokenizer) not in (BertTokenizer, ErnieTokenizer, RobertaChineseTokenizer) or \
            not getattr(tokenizer, "do_basic_tokenize", True):
        return None
    basic = tokenizer.basic_tokenizer
    backend = Tokenizer(models.WordPiece(tokenizer.get_vocab(), unk_token=tokenizer.unk_token,
                                         max_input_chars_per_word=tokenizer.wordpiece_tokenizer.max_input_chars_per_word))
    # PaddleNLP strips accents when it lower-cases (unless strip_accents is False) or when strip_accents is True
    strip_accents = basic.strip_accents if basic.strip_accents is not None else basic.do_lower_case
    backend.normalizer = normalizers.Sequence([
        normalizers.Replace(Regex(_dropped_characters(bool(strip_accents))), ""),
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=basic.tokenize_chinese_chars,
                                   strip_accents=basic.strip_accents, lowercase=basic.do_lower_case)])
    # PaddleNLP splits off every punctuation *and symbol* character (BERT itself only punctuation)
    isolated = _PUNCTUATION_OR_SYMBOL + (_CJK_MISSED_BY_TOKENIZERS if basic.tokenize_chinese_chars else "")
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(f"[{isolated}]"), behavior="isolated")])
    cls, sep = tokenizer.cls_token, tokenizer.sep_token
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.cls_token_id), (sep, tokenizer.sep_token_id)])
    backend.add_special_tokens(list(tokenizer.all_special_tokens))  # "[SEP]" inside a text stays one token
    return FastBertTokenizer(tokenizer, backend)


def fastest(tokenizer):
    """`tokenizer`'s fast equivalent where there is one, else `tokenizer` itself."""
    return fast_tokenizer_for(tokenizer) or tokenizer


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
