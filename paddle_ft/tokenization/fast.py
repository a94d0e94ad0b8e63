"""What every fast (Rust, Hugging Face `tokenizers`) tokenizer of paddle_ft does the same way: a batch of texts (or
text pairs) to ids, cut to a length, with the cut reported.

The kinds differ in how a pair is framed ([CLS] A [SEP] B [SEP] with segment ids 0/1 for WordPiece,
<s> A </s></s> B </s> with segment ids all 0 for XLM-R's SentencePiece) and in where their vocabulary and specials
come from; `pair_frame` and the special ids are theirs to give.
"""
from __future__ import annotations

from typing import Sequence


class FastTokenizer:
    """One instance is not meant to be shared by threads that encode with different max_lengths (the backend's
    truncation setting is switched per call)."""

    text_prefix = ""
    """Put before every (first) text: an embedding model's instruction, as e5's "query: " (model.text_prefix)."""

    def __init__(self, backend):
        self._backend, self._truncation = backend, None

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
               max_length: int | None = None) -> tuple[list[list[int]], list[list[int]], list[bool]]:
        """(input_ids, token_type_ids, truncated) per text, with the specials, cut to `max_length`."""
        texts = [self.text_prefix + text for text in texts] if self.text_prefix else texts
        if pairs is not None:
            return self._encode_pairs(texts, pairs, max_length)
        self._truncate_at(max_length)
        encodings = self._backend.encode_batch(list(texts))
        return ([e.ids for e in encodings], [e.type_ids for e in encodings],
                [bool(e.overflowing) for e in encodings])

    def encode_with_offsets(self, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], list[list]]:
        """(input_ids, (start, end) character span of each token in its text) per text, cut to `max_length`;
        the specials' and the prefix's spans are (0, 0)."""
        self._truncate_at(max_length)
        shift = len(self.text_prefix)
        encodings = self._backend.encode_batch([self.text_prefix + text for text in texts])
        return [e.ids for e in encodings], [[(max(a - shift, 0), max(b - shift, 0)) for a, b in e.offsets]
                                            for e in encodings]

    def pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text without specials and uncut: what a vocabulary must hold to read it."""
        self._truncate_at(None)
        return [e.ids for e in self._backend.encode_batch(list(texts), add_special_tokens=False)]

    def _truncate_at(self, max_length: int | None) -> None:
        if max_length != self._truncation:
            if max_length is None:
                self._backend.no_truncation()
            else:
                self._backend.enable_truncation(max_length, strategy="longest_first")
            self._truncation = max_length

    def pair_frame(self) -> tuple[list[int], list[int], list[int], int]:
        """(ids before the first text, between the two, after the second; the second text's segment id)."""
        return [self.cls_token_id], [self.sep_token_id], [self.sep_token_id], 1

    def _encode_pairs(self, texts, pairs, max_length):
        """Pairs are truncated here, because `tokenizers` gives an odd leftover token to the second text
        and PaddleNLP to the first."""
        firsts, seconds = self.pieces(texts), self.pieces(pairs)
        before, between, after, second_type = self.pair_frame()
        frame = len(before) + len(between) + len(after)
        ids, types, truncated = [], [], []
        for a, b in zip(firsts, seconds):
            keep_a, keep_b = _longest_first(len(a), len(b), None if max_length is None else max_length - frame)
            ids.append([*before, *a[:keep_a], *between, *b[:keep_b], *after])
            types.append([0] * (len(before) + keep_a + len(between)) + [second_type] * (keep_b + len(after)))
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
