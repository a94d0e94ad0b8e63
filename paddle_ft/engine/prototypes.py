"""Where a prototype head's prototypes start: the embedding of each label's description (zero-shot), or the mean
of each class's training rows (few-shot, and a fine-tuned prototype head)."""
from __future__ import annotations

import numpy as np

from paddle_ft.data.features import Features
from paddle_ft.engine.evaluate import embed_rows
from paddle_ft.errors import UserError
from paddle_ft.tokenization import NO_TOKEN, without_tokens

BATCH = 32


def class_means(vectors: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """[classes, hidden]: the mean of each class's unit vectors."""
    missing = [c for c in range(num_classes) if not (labels == c).any()]
    if missing:
        raise UserError(f"class ids {missing} have no training row, so no prototype; give each label a row, or a "
                        "description (data.label_descriptions)")
    return np.stack([vectors[labels == c].mean(axis=0) for c in range(num_classes)])


def text_vectors(model, tokenizer, texts: list[str], max_length: int, source: str) -> np.ndarray:
    """Unit vectors [n, hidden] of some texts (descriptions, examples), read as the model reads any text."""
    empty = without_tokens(texts)
    if empty:
        raise UserError(f"{source}: {texts[empty[0]]!r} {NO_TOKEN}")
    ids, types, _ = tokenizer.encode(texts, max_length=max_length)
    features = Features([np.asarray(x, dtype=np.int64) for x in ids], [np.asarray(t, dtype=np.int64) for t in types],
                        None)
    return embed_rows(model, features, BATCH, tokenizer.pad_token_id)


def start_prototypes(model, tokenizer, label_names: tuple[str, ...], max_length: int,
                     descriptions: dict[str, str] | None, train: Features | None, source: str) -> str:
    """Set the head's prototypes from the labels' descriptions (from `source`) or else the training rows' class
    means; returns what they came from, to log."""
    if descriptions is not None:
        missing = [name for name in label_names if name not in descriptions]
        if missing:
            raise UserError(f"{source} describes no {', '.join(missing)}: describe every label")
        model.classifier.set_prototypes(text_vectors(model, tokenizer, [descriptions[n] for n in label_names],
                                                     max_length, source))
        return f"the descriptions in {source}"
    vectors = embed_rows(model, train, BATCH, tokenizer.pad_token_id)
    model.classifier.set_prototypes(class_means(vectors, train.labels, len(label_names)))
    return "the mean of each class's training rows"
