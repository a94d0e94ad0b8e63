"""Why a trained model gave an answer: how much each token pushed it (integrated gradients on the word embeddings,
Sundararajan, Taly and Yan, ICML 2017) and which training texts the model sees as nearest (cosine similarity of the
pooled vector its head reads).

    >>> explainer = paddle_ft.Explainer.load("out/demo/best")
    >>> explainer.explain("质量很好，物流快")                      # the predicted label's explanation(s)
    >>> explainer.index(texts, labels); explainer.nearest("质量很好", k=3)

Integrated gradients: the path from a baseline, where every token of the text is the [PAD] embedding ([CLS], [SEP]
and the attention mask stay as in the text, so only what the words say moves), to the text's own embeddings. A
token's attribution is its embedding's difference from the baseline times the gradient integrated along the path
(`steps` gradient points, placed where the probability changes: `Explainer._quadrature`), summed over the hidden
dimensions; the attributions add up to the change of the explained probability from baseline to text, short of the
`completeness_error` (fewer steps, more error).
Works on the dynamic model (`best/`): an export holds no gradients."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import paddle

from paddle_ft.artifacts.bundle import Bundle, load_bundle
from paddle_ft.data.features import Features, eval_batches, pad_batch, tokenize
from paddle_ft.data.readers import Example
from paddle_ft.errors import UserError
from paddle_ft.text import sigmoid, softmax
from paddle_ft.tokenization import check_texts, fastest

BATCH = 64  # texts per forward pass when indexing
SEGMENTS = 16  # of the path, probed first to place the gradient points where the probability changes


@dataclass(frozen=True)
class Neighbour:
    text: str
    label: str | None
    similarity: float
    """Cosine similarity of the pooled vectors, 1 = the same."""


@dataclass(frozen=True)
class Explanation:
    text: str
    text_pair: str | None
    label: str
    """The label explained (the predicted one, or one asked for)."""
    probability: float
    tokens: list[str]
    """The tokens the model read ([CLS] and [SEP] included; a long text: its first window, as truncated)."""
    segments: list[int]
    """0: a token of the text, 1: of the pair text."""
    attributions: np.ndarray
    """[tokens]: how much each token moved the label's probability from the baseline (0 for [CLS], [SEP])."""
    baseline_probability: float
    completeness_error: float
    """|sum of the attributions - (probability - baseline probability)|."""
    neighbours: list[Neighbour] = field(default_factory=list)

    def top_tokens(self, k: int = 5) -> list[tuple[int, str, float]]:
        """(position, token, attribution) of the k tokens that pushed the label most, strongest first."""
        order = np.argsort(-self.attributions, kind="stable")[:k]
        return [(int(i), self.tokens[i], float(self.attributions[i])) for i in order]

    def as_dict(self) -> dict:
        return {"text": self.text, **({"text_pair": self.text_pair} if self.text_pair is not None else {}),
                "label": self.label, "probability": round(self.probability, 6),
                "tokens": [{"token": t, "segment": s, "attribution": round(float(a), 6)}
                           for t, s, a in zip(self.tokens, self.segments, self.attributions)],
                "top_tokens": [t for _, t, _ in self.top_tokens()],
                "baseline_probability": round(self.baseline_probability, 6),
                "completeness_error": round(self.completeness_error, 6),
                "neighbours": [{"text": n.text, "label": n.label, "similarity": round(n.similarity, 4)}
                               for n in self.neighbours]}


class Explainer:
    def __init__(self, bundle: Bundle, steps: int = 50, batch_size: int = 25):
        if steps < 1:
            raise ValueError("steps must be at least 1")
        self.bundle, self.meta, self.model = bundle, bundle.meta, bundle.model
        self.tokenizer = fastest(bundle.tokenizer)
        self.steps, self.batch_size = steps, batch_size
        self.model.eval()
        self._index: tuple[np.ndarray, list[Example]] | None = None

    @classmethod
    def load(cls, folder: str | Path, **options) -> Explainer:
        return cls(load_bundle(folder), **options)

    # ------------------------------------------------------------------ attributions

    def explain(self, text: str, text_pair: str | None = None, label: str | None = None,
                neighbours: int = 0) -> list[Explanation]:
        """The explanation of `label`, or of the model's answer: its label (single-label), each label of its set
        (multi-label; the most probable one when the set is empty). A text the model cannot read (`check_texts`: the
        rule of predict, the API and the server), or a second text given to a single-text model or missing for a
        pair model, is a `UserError`."""
        text = check_texts([text], "the text")[0]
        if (text_pair is not None) != self.meta.takes_text_pair:
            raise UserError("this model classifies text pairs: give a second text" if self.meta.takes_text_pair
                            else "this model classifies single texts: give no second text")
        if text_pair is not None:
            text_pair = check_texts([text_pair], "the second text")[0]
        features = self._features([Example(text, text_pair, None, 0)])
        input_ids, token_type_ids = features.input_ids[0], features.token_type_ids[0]
        probabilities = self._probabilities(self._logits(input_ids[None], token_type_ids[None]))[0]
        labels = [label] if label is not None else self._answer(probabilities)
        near = self.nearest(text, neighbours, text_pair) if neighbours else []
        return [self._explained(text, text_pair, input_ids, token_type_ids, self._class_id(name), near)
                for name in labels]

    def probability_without(self, explanation: Explanation, positions) -> float:
        """The explained label's probability once the tokens at `positions` are taken out of what the model read (the
        deletion test: removing the tokens that matter should cost the answer more than removing others)."""
        kept = [i for i in range(len(explanation.tokens)) if i not in set(positions)]
        ids = np.array(self.tokenizer.convert_tokens_to_ids([explanation.tokens[i] for i in kept]), dtype=np.int64)
        segments = np.array([explanation.segments[i] for i in kept], dtype=np.int64)
        probabilities = self._probabilities(self._logits(ids[None], segments[None]))[0]
        return float(probabilities[self._class_id(explanation.label)])

    def _explained(self, text, text_pair, input_ids, token_type_ids, class_id: int, near) -> Explanation:
        embedding = self._word_embeddings(input_ids)
        special = np.isin(input_ids, [self.tokenizer.cls_token_id, self.tokenizer.sep_token_id])
        baseline = np.where(special[:, None], embedding, self._word_embeddings(
            np.full_like(input_ids, self.tokenizer.pad_token_id)))
        alphas, weights, along = self._quadrature(baseline, embedding, input_ids, token_type_ids, class_id)
        gradient = np.zeros_like(embedding)
        for start in range(0, len(alphas), self.batch_size):
            chunk = alphas[start:start + self.batch_size]
            path = baseline[None] + chunk[:, None, None] * (embedding - baseline)[None]  # [chunk, seq, hidden]
            gradient += np.einsum("p,psh->sh", weights[start:start + self.batch_size],
                                  self._gradient(path, input_ids, token_type_ids, class_id))
        attributions = ((embedding - baseline) * gradient).sum(axis=-1)
        at_baseline, probability = along[0], along[-1]
        return Explanation(text, text_pair, self.meta.labels[class_id], float(probability),
                           self.tokenizer.convert_ids_to_tokens([int(i) for i in input_ids]),
                           [int(s) for s in token_type_ids], attributions, float(at_baseline),
                           float(abs(attributions.sum() - (probability - at_baseline))), near)

    def _quadrature(self, baseline, embedding, input_ids, token_type_ids, class_id: int):
        """(points on the path, their weights, the probability at the `SEGMENTS` + 1 segment ends). A trained model's
        probability often turns in a narrow stretch of the path, which equal steps step over (50 of them left a third
        of the change unexplained on a tiny model that 1,000 explain to 1e-6). So the path is first cut into equal
        segments, probed without gradients, and each segment gets gradient points in proportion to how much the
        probability changes across it (at least one); the midpoints of each segment's equal slices, weighted by
        their width. Still integrated gradients, computed where the integrand lives."""
        segments = min(SEGMENTS, self.steps)
        ends = np.linspace(0, 1, segments + 1)
        path = baseline[None] + ends[:, None, None] * (embedding - baseline)[None]
        with self._embeddings_replaced(paddle.to_tensor(path.astype("float32"))), paddle.no_grad():
            logits = self.model(paddle.to_tensor(np.repeat(input_ids[None], len(ends), axis=0)),
                                paddle.to_tensor(np.repeat(token_type_ids[None], len(ends), axis=0))).numpy()
        along = self._probabilities(logits)[:, class_id]
        change = np.abs(np.diff(along))
        spare = self.steps - segments
        counts = np.ones(segments, dtype=np.int64) + (np.floor(spare * change / change.sum()).astype(np.int64)
                                                       if change.sum() > 0 else 0)
        alphas, weights = [], []
        for segment, count in enumerate(counts):
            width = 1 / segments / count
            alphas += [ends[segment] + (k + 0.5) * width for k in range(count)]
            weights += [width] * count
        return np.array(alphas), np.array(weights), along

    def _gradient(self, path: np.ndarray, input_ids, token_type_ids, class_id: int) -> np.ndarray:
        """d probability[class_id] / d word embeddings at each point of `path` [points, seq, hidden]."""
        points = paddle.to_tensor(path.astype("float32"), stop_gradient=False)
        with self._embeddings_replaced(points):
            logits = self.model(paddle.to_tensor(np.repeat(input_ids[None], len(path), axis=0)),
                                paddle.to_tensor(np.repeat(token_type_ids[None], len(path), axis=0)))
        scores = logits / self.meta.temperature
        probability = paddle.nn.functional.sigmoid(scores) if self.meta.multi_label else \
            paddle.nn.functional.softmax(scores, axis=-1)
        probability[:, class_id].sum().backward()
        gradient = points.grad.numpy()
        self.model.clear_gradients()
        return gradient

    @contextlib.contextmanager
    def _embeddings_replaced(self, replacement: paddle.Tensor):
        """The encoder's word-embedding lookup returns `replacement` [batch, seq, hidden] for the block."""
        handle = self.model.encoder.embeddings.word_embeddings.register_forward_post_hook(
            lambda layer, inputs, output: replacement)
        try:
            yield
        finally:
            handle.remove()

    def _word_embeddings(self, input_ids: np.ndarray) -> np.ndarray:
        with paddle.no_grad():
            return self.model.encoder.embeddings.word_embeddings(paddle.to_tensor(input_ids[None])).numpy()[0]

    # ------------------------------------------------------------------ nearest training texts

    def index(self, examples: list[Example]) -> None:
        """Make `examples` (labelled or not) the texts `nearest` searches."""
        self._index = (self._pooled(examples), examples)

    def nearest(self, text: str, k: int, text_pair: str | None = None) -> list[Neighbour]:
        """The `k` indexed texts whose pooled vectors are nearest to this text's (cosine similarity)."""
        if self._index is None:
            raise ValueError("no texts to search: call index() first")
        vectors, examples = self._index
        similarity = vectors @ self._pooled([Example(text, text_pair, None, 0)])[0]
        order = np.argsort(-similarity, kind="stable")[:k]
        return [Neighbour(examples[i].text, ",".join(examples[i].label_names) if examples[i].label else None,
                          float(similarity[i])) for i in order]

    def _pooled(self, examples: list[Example]) -> np.ndarray:
        """[texts, hidden]: the unit-length vector the head reads, per text (a long text's windows averaged)."""
        features = self._features(examples)
        vectors = np.zeros((len(features), self.model.classifier.weight.shape[0]), dtype=np.float32)
        captured = []
        handle = self.model.classifier.register_forward_pre_hook(lambda layer, inputs: captured.append(inputs[0]))
        try:
            with paddle.no_grad():
                for positions in eval_batches(features.lengths, BATCH):
                    batch = pad_batch(features, positions, self.tokenizer.pad_token_id)
                    self.model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
                    vectors[positions] = captured.pop().numpy()
        finally:
            handle.remove()
        if features.documents is not None:
            vectors = np.stack([vectors[features.documents == d].mean(axis=0) for d in range(len(examples))])
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    # ------------------------------------------------------------------ helpers

    def _features(self, examples: list[Example]) -> Features:
        return tokenize(examples, self.tokenizer, self.meta.max_length, None, self.meta.truncation_rule)

    def _logits(self, input_ids, token_type_ids) -> np.ndarray:
        with paddle.no_grad():
            return self.model(paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids)).numpy()

    def _probabilities(self, logits: np.ndarray) -> np.ndarray:
        scores = logits / self.meta.temperature
        return sigmoid(scores) if self.meta.multi_label else softmax(scores)

    def _answer(self, probabilities: np.ndarray) -> list[str]:
        if not self.meta.multi_label:
            return [self.meta.labels[int(probabilities.argmax())]]
        chosen = [n for n, p, t in zip(self.meta.labels, probabilities, self.meta.label_thresholds) if p >= t]
        return chosen or [self.meta.labels[int(probabilities.argmax())]]

    def _class_id(self, label: str) -> int:
        if label not in self.meta.labels:
            raise UserError(f"--label {label!r} is not one of the model's labels ({', '.join(self.meta.labels)})")
        return self.meta.labels.index(label)

