"""`paddle_ft.Classifier`: an exported model as a function from texts to answers.

    >>> classify = paddle_ft.Classifier("out/demo/export")
    >>> classify("这个服务太差了")
    {'label': '负面', 'score': 0.98, 'probabilities': {'负面': 0.98, '正面': 0.02}, 'truncated': False,
     'windows': 1}
    >>> classify(["质量很好", "太差了"], top_k=2)
    [{'label': '正面', ..., 'top_k': [{'label': '正面', 'score': 0.97}, {'label': '负面', 'score': 0.03}]}, {...}]

An answer is the one every interface gives (`Prediction.as_dict`: `predict`'s rows, the HTTP service, Ray's
shards). A multi-label model answers with the labels whose probability reaches their threshold (tuned on dev at
training), most probable first, maybe none:

    >>> paddle_ft.Classifier("out/topics/export")("央行降息后股市大涨")["labels"]
    ['财经', '股票']

Labels written as paths of a tree (data.label_hierarchy) are answered as their leaves, with the top one's `path`;
an answer the model abstains on carries the deepest level it is sure of, as `"answer": {"label": "电子", "score":
0.93}` (None if none).

A text longer than the model's max_length is cut as training cut it (its `data.truncation`), or as `truncation` says
(`"head"` keeps its beginning, `"tail"` its end, `"head_tail"` both), and its answer then says `"truncated": True`
(read in sliding windows, `"windows": N`). A model trained on text pairs takes a `(text, second_text)` tuple, a
list of them, or `classify(texts, text_pair=second_texts)`.
"""
from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from paddle_ft.arguments import require_int
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.tokenization.readable import check_sequence

OPTION_NAMES = tuple(f.name for f in fields(PredictOptions))


class Classifier:
    def __init__(self, export_dir: str | Path, options: PredictOptions | None = None, **settings):
        """`options`, or the same as keywords (`settings`: top_k, batch_size, truncation, abstain_below, device,
        cpu_threads, precision, backend, ...; `PredictOptions`). `top_k` (default 1): labels listed per text of a
        single-label model. `abstain_below`: the confidence under which an answer says "abstained": True (default:
        the model's own, train.decision)."""
        unknown = sorted(set(settings) - set(OPTION_NAMES))
        if unknown:
            raise UserError(f"Classifier: no option {unknown[0]!r}; the options are {', '.join(OPTION_NAMES)}")
        options = replace(options or PredictOptions(), **settings)
        self.predictor = Predictor(export_dir, options)
        self.labels = tuple(self.predictor.labels)
        self.multi_label = self.predictor.meta.multi_label
        self.top_k = self._check_top_k(options.top_k)

    def __call__(self, texts, top_k: int | None = None, batch_size: int | None = None,
                 text_pair: list[str] | None = None):
        """One text (or pair) -> its answer (a dict); a list of them -> a list of those, in order."""
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
        predictions = self.predictor.predict(batch, batch_size,
                                             text_pair=list(text_pair) if text_pair is not None else None)
        results = [p.as_dict(k) for p in predictions]
        return results[0] if single else results

    def _check_top_k(self, top_k) -> int | None:
        """The single-label model's top_k (default 1); a multi-label model's answer is its label set."""
        if self.multi_label:
            if top_k is not None:
                raise UserError("top_k: this multi-label model answers with every label that reaches its threshold; "
                                "leave top_k out")
            return None
        return 1 if top_k is None else require_int("top_k", top_k, 1, len(self.labels))
