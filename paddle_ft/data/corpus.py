"""Unlabeled text for pretraining: read, split off a held-out slice, tokenised (with word groups for
whole-word masking)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from paddle_ft.data.features import Features
from paddle_ft.data.readers import read_texts
from paddle_ft.data.tokenizer import FastBertTokenizer
from paddle_ft.errors import ConfigError


def read_corpus(paths: tuple[str, ...], text_column: str) -> list[str]:
    """Every text of every file: .txt one per line, .tsv/.csv/.jsonl their text column."""
    texts: list[str] = []
    for path in paths:
        texts += read_texts(Path(path), text_column)[0]
    return texts


def held_out(count: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, held-out indices): a seeded random `share` of the texts (at least one) is held out."""
    order = np.random.default_rng([seed, 1]).permutation(count)
    kept = max(1, int(round(share * count)))
    return np.sort(order[kept:]), np.sort(order[:kept])


def pretraining_features(texts: list[str], tokenizer, max_length: int, whole_word: bool) -> Features:
    """Token ids of `texts` (no labels); with `whole_word`, each token's word as jieba segments the text."""
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
