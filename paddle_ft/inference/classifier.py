"""`paddle_ft.Classifier`: an exported model as a function from texts to labels.

    >>> classify = paddle_ft.Classifier("out/demo/export")
    >>> classify("这个服务太差了")
    [{'label': '负面', 'score': 0.98}]
    >>> classify(["质量很好", "太差了"], top_k=2)
    [[{'label': '正面', ...}, {'label': '负面', ...}], [...]]

A multi-label model answers with the labels whose probability reaches their threshold (tuned on dev at
training), most probable first, maybe none:

    >>> paddle_ft.Classifier("out/topics/export")("央行降息后股市大涨")
    [{'label': '财经', 'score': 0.97}, {'label': '股票', 'score': 0.81}]

Labels written as paths of a tree (data.label_hierarchy) are answered as their leaves; an answer the model
abstains on carries the deepest level it is sure of, as `"answer": {"label": "电子", "score": 0.93}` (None if none).

A text longer than the model's max_length is cut as training cut it (its `data.long_text`), or as
`truncation` says (`"head"` keeps its beginning, `"tail"` its end, `"head_tail"` both), and each of its
labels then carries `"truncated": True` (and, read in sliding windows, `"windows": N`). A model trained on text pairs
takes a `(text, second_text)` tuple, a list of them, or `classify(texts, text_pair=second_texts)`.
"""
from __future__ import annotations

from pathlib import Path

from paddle_ft.arguments import require_int
from paddle_ft.errors import UserError
from paddle_ft.inference.predictor import Predictor
from paddle_ft.text import TRUNCATIONS
from paddle_ft.tokenization.readable import check_sequence


class Classifier:
    def __init__(self, export_dir: str | Path, top_k: int | None = None, batch_size: int = 32,
                 truncation: str | None = None, abstain_below: float | None = None, **predictor_options):
        """`top_k` (default 1): labels per text of a single-label model. `abstain_below`: the confidence under which
        an answer carries "abstained": True (default: the model's own, train.decision). `predictor_options` go to
        `Predictor` (device, cpu_threads, precision, use_tensorrt, ...)."""
        if truncation not in (None, *TRUNCATIONS):
            raise UserError(f"truncation '{truncation}': choose one of {', '.join(TRUNCATIONS)}")
        self.predictor = Predictor(export_dir, **predictor_options)
        self.abstain_below = self.predictor.check_abstain_below(abstain_below)
        self.labels = tuple(self.predictor.labels)
        self.multi_label = self.predictor.meta.multi_label
        self.top_k, self.batch_size, self.truncation = self._check_top_k(top_k), _positive(batch_size), truncation

    def __call__(self, texts, top_k: int | None = None, batch_size: int | None = None,
                 text_pair: list[str] | None = None):
        """One text (or pair) -> its `top_k` labels (a multi-label model: its label set), best first; a list of
        them -> a list of those, in order."""
        single = isinstance(texts, (str, tuple))
        batch = [texts] if single else check_sequence(texts)
        if batch and all(isinstance(t, tuple) and len(t) == 2 for t in batch):
            if text_pair is not None:
                raise UserError("give the second texts either inside (text, second_text) tuples or as text_pair")
            batch, text_pair = [t for t, _ in batch], [pair for _, pair in batch]
        if not all(isinstance(t, str) for t in batch + list(text_pair or [])):
            raise UserError("Classifier takes a text, a (text, second_text) tuple, or a list of either (str)")
        k = self.top_k if top_k is None else self._check_top_k(top_k)
        if not batch:
            return []
        predictions = self.predictor.predict(batch, _positive(self.batch_size if batch_size is None else batch_size),
                                             self.truncation, list(text_pair) if text_pair is not None else None,
                                             self.abstain_below)
        results = [[{"label": label, "score": score, **({"truncated": True} if p.truncated else {}),
                     **({"abstained": True} if p.abstained else {}),
                     **({"answer": p.tree_fields()["answer"]} if p.abstained and p.hierarchy else {}),
                     **({"windows": p.windows} if p.windows > 1 else {})}
                    for label, score in self._answer(p, k)] for p in predictions]
        return results[0] if single else results

    @staticmethod
    def _answer(prediction, k: int | None) -> list[tuple[str, float]]:
        if prediction.labels is None:
            return prediction.top(k)
        return [(label, float(prediction.vector[prediction.names.index(label)])) for label in prediction.labels]

    def _check_top_k(self, top_k) -> int | None:
        """The single-label model's top_k (default 1); a multi-label model's answer is its label set."""
        if self.multi_label:
            if top_k is not None:
                raise UserError("top_k: this multi-label model answers with every label that reaches its threshold; "
                                "leave top_k out")
            return None
        return 1 if top_k is None else require_int("top_k", top_k, 1, len(self.labels))


def _positive(batch_size) -> int:
    return require_int("batch_size", batch_size, 1)
