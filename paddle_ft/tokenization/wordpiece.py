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

from paddle_ft.tokenization.fast import FastTokenizer

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


class FastBertTokenizer(FastTokenizer):
    """Encodes like the PaddleNLP tokenizer it was built from; everything else is delegated to it."""

    def __init__(self, slow, backend):
        super().__init__(backend)
        self.slow = slow

    def __len__(self) -> int:  # dunder methods are looked up on the class, not through __getattr__
        return len(self.slow)

    def __getattr__(self, name):  # pad_token_id, vocab, save_pretrained, ...
        if name in ("slow", "_backend", "_truncation") or name.startswith("__"):
            raise AttributeError(name)  # not set yet (copy, unpickling): no recursion through self.slow
        return getattr(self.slow, name)


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
