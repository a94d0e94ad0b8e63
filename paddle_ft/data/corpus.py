"""Unlabeled text for pretraining: read, split off a held-out slice, tokenised (with word groups for
whole-word masking)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from paddle_ft.data.features import Features
from paddle_ft.data.readers import read_texts
from paddle_ft.errors import ConfigError
from paddle_ft.log import log
from paddle_ft.text import Truncation
from paddle_ft.tokenization import FastBertTokenizer


def read_corpus(paths: tuple[str, ...], text_column: str) -> tuple[list[str], list[tuple[str, int]]]:
    """Every text of every file (.txt one per line, .tsv/.csv/.jsonl their text column), and the (file, line) each
    came from."""
    texts: list[str] = []
    origins: list[tuple[str, int]] = []
    for path in paths:
        read, _, lines = read_texts(Path(path), text_column)
        texts += read
        origins += [(str(path), line) for line in lines]
    return texts, origins


def unmaskable(features: Features, special_ids: frozenset[int], origins: list[tuple[str, int]]) -> np.ndarray:
    """The texts masked-LM can predict nothing of: special tokens only ([UNK] included: a line of characters the
    vocabulary lacks; a text of nothing readable was refused as it was read). They stay in, learn nothing, and are
    counted in a warning. Returns a mask [texts] of them, so the caller can check each split keeps some."""
    specials = np.fromiter(special_ids, dtype=np.int64)
    nothing = np.array([bool(np.isin(ids, specials).all()) for ids in features.input_ids], dtype=bool)
    if nothing.any():
        path, line = origins[int(np.flatnonzero(nothing)[0])]
        log(f"warning: {int(nothing.sum())} corpus texts hold no token to mask, only [UNK] or other special tokens "
            f"(first: {path}:{line}); they teach nothing")
    return nothing


def held_out(count: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, held-out indices): a seeded random `share` of the texts (at least one) is held out."""
    order = np.random.default_rng([seed, 1]).permutation(count)
    kept = max(1, int(round(share * count)))
    return np.sort(order[kept:]), np.sort(order[:kept])


def pretraining_features(texts: list[str], tokenizer, max_length: int, whole_word: bool) -> Features:
    """Token ids of `texts` (no labels); with `whole_word`, each token's word as jieba segments the text."""
    texts = [Truncation("head").characters_read(text, max_length) for text in texts]  # a long line costs no more
    if not whole_word:
        encoded = tokenizer(texts, max_length=max_length, truncation=True)
        return Features([np.asarray(x, dtype=np.int64) for x in encoded["input_ids"]],
                        [np.asarray(t, dtype=np.int64) for t in encoded["token_type_ids"]], None)
    if not isinstance(tokenizer, FastBertTokenizer):
        raise ConfigError("pretrain.whole_word", "needs a WordPiece (BERT / ERNIE / RoBERTa-zh) vocabulary; set "
                          "pretrain.whole_word: false")
    try:
        import jieba
    except ImportError:
        raise ConfigError("pretrain.whole_word", "segments words with jieba, which is not installed: pip install "
                          "jieba, or set pretrain.whole_word: false") from None
    jieba.setLogLevel(60)  # its dictionary-loading lines are not ours to print
    ids, offsets = tokenizer.encode_with_offsets(texts, max_length)
    word_ids = [_word_of_each_token(text, spans) for text, spans in zip(texts, offsets)]
    return Features([np.asarray(x, dtype=np.int64) for x in ids], [np.zeros(len(x), dtype=np.int64) for x in ids],
                    None, word_ids)


def _word_of_each_token(text: str, spans: list) -> np.ndarray:
    """The index of the jieba word each token starts in; -1 for [CLS] and [SEP] (empty spans)."""
    import jieba

    word_at = np.zeros(len(text) + 1, dtype=np.int64)
    for index, (_, start, end) in enumerate(jieba.tokenize(text)):
        word_at[start:end] = index
    return np.array([word_at[start] if end > start else -1 for start, end in spans], dtype=np.int64)


UNKNOWN_WARN, UNKNOWN_REFUSE = 0.05, 0.30
"""Shares of [UNK] among a corpus's tokens: above the first the vocabulary barely covers the text (a warning),
above the second most of what the model would learn is [UNK] (refused)."""


def check_unknown_share(features: Features, unk_id: int) -> float:
    """The share of [UNK] among the corpus's tokens (special tokens aside), warned about or refused as above."""
    inner = [ids[1:-1] for ids in features.input_ids]  # without [CLS] and [SEP]
    tokens = np.concatenate(inner) if inner else np.zeros(0, dtype=np.int64)
    share = float(np.mean(tokens == unk_id)) if len(tokens) else 0.0
    advice = "the vocabulary does not cover this text: use a vocabulary (model.scratch.vocab_file or the backbone's) " \
             "built for its language and script"
    if share > UNKNOWN_REFUSE:
        raise ConfigError("pretrain.corpus", f"{share:.0%} of its tokens are [UNK] (more than {UNKNOWN_REFUSE:.0%}); "
                          f"{advice}")
    if share > UNKNOWN_WARN:
        log(f"warning: {share:.1%} of the pretraining corpus's tokens are [UNK]; {advice}")
    return share
