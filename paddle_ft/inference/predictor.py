"""`Predictor`: an exported folder served by Paddle Inference. Imports no training code.

An exported folder holds `model.json` (Paddle 3, PIR) or `model.pdmodel` (Paddle 2.6), `model.pdiparams`,
`model.onnx` (the same graph for ONNX Runtime), the tokenizer files, `label_map.json` and `export.json`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from paddle_ft.arguments import require_int
from paddle_ft.artifacts.export_folder import PARAMS_FILE, REEXPORT, onnx_file, program_file, read_export_info
from paddle_ft.errors import UserError, first_line
from paddle_ft.inference import routing
from paddle_ft.inference.backends import choose_backend
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.routing import Engines
from paddle_ft.models.hierarchy import Hierarchy
from paddle_ft.runtime import check_environment, cpu_supports_bf16, quiet
from paddle_ft.text import TRUNCATIONS, Truncation, pad_ids, pool_windows, sigmoid, softmax
from paddle_ft.tokenization import FastTokenizer, check_texts, load_tokenizer

PRECISIONS = {"cpu": ("fp32", "bf16"), "gpu": ("fp32", "fp16")}
ALL_PROBABILITIES = 100  # an answer of a model of more labels lists only the most probable ones' probabilities
TOP_PROBABILITIES = 20


class Predictor:
    """preprocess (tokenise, pad) -> run (the engines, `routing.Engines`) -> postprocess (softmax and the top label;
    for a multi-label model a sigmoid per label and the labels at or above their thresholds)."""

    def __init__(self, export_dir: str | Path, options: PredictOptions | None = None):
        """`options`: the device, precision, engine (`backend`: paddle, onnxruntime, or auto: where all can run the
        request (CPU, fp32, an export with model.onnx), each call on the engine measured fastest at its size) and
        the defaults of `predict` (batch size, truncation, abstain threshold)."""
        quiet()  # as quiet as the command line
        check_environment()  # refused here as by the commands (the MKL path itself is the process's to choose)
        options = self.options = options or PredictOptions()
        export_dir = self.export_dir = Path(export_dir)
        program = program_file(export_dir)
        if options.use_tensorrt:
            check_tensorrt(program, options.device)
        backend = options.backend
        if options.use_tensorrt or not options.enable_onednn:  # both Paddle Inference's
            backend = "paddle" if backend in (None, "auto") else backend
        check_device(options.device, options.precision)
        info = read_export_info(export_dir)
        self.backend = choose_backend(backend, export_dir, options.device, options.precision,
                                      info.quantization is not None)
        if self.backend == "onnxruntime" and (options.use_tensorrt or not options.enable_onednn):
            raise UserError("TensorRT and oneDNN are Paddle Inference's: use backend paddle for them")
        self.meta = info.model
        self.max_length = self.meta.max_length
        self.labels = list(self.meta.labels)  # class id -> label name
        self._thresholds = np.asarray(self.meta.label_thresholds)  # multi-label: each label's
        self.takes_text_pair = self.meta.takes_text_pair  # trained on (text, second text) pairs
        self.abstain_below = self.check_abstain_below(options.abstain_below)
        try:
            self.tokenizer = load_tokenizer(export_dir, self.meta.text_prefix)
        except UserError as exc:
            raise UserError(f"{export_dir}: the tokenizer files cannot be loaded ({first_line(exc)}); {REEXPORT}") \
                from None
        try:
            self.engines = Engines.open(self.backend, [program, export_dir / PARAMS_FILE, onnx_file(export_dir)],
                                        options, self.max_length,
                                        (self.tokenizer.cls_token_id, self.tokenizer.pad_token_id))
        except (RuntimeError, ValueError, OSError, MemoryError) as exc:  # a truncated or garbled graph/weights
            raise UserError(f"{export_dir}: {program.name} / {PARAMS_FILE} cannot be loaded ({first_line(exc)}); "
                            f"the files are damaged or from another model: {REEXPORT}") from None

    @property
    def route(self) -> routing.Route:
        return self.engines.route

    @property
    def engine_description(self) -> str:
        """Which engine runs which calls, for logs and GET /v1/model."""
        return self.backend if self.backend != "auto" else f"auto: {self.route.describe()}"

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        """Logits [batch, num_classes] for padded ids [batch, seq] int64, from the engine the route picks."""
        return self.engines.run(input_ids, token_type_ids)

    def predict(self, texts: list[str], batch_size: int | None = None, truncation: str | None = None,
                text_pair: list[str] | None = None, abstain_below: float | None = None) -> list[Prediction]:
        """One `Prediction` per text, in order; `text_pair` holds the second text of each, for a model trained on
        text pairs. A text longer than max_length is read as training read it (`truncation` None), or by its
        first tokens (`head`), its last ones (`tail`, where reviews often say what they conclude), both ends
        (`head_tail`) or in pooled windows (`sliding_window`); a pair is cut longest-first, as in training.
        A single-label model abstains on a text whose top probability is below `abstain_below` (default: the
        model's own threshold, train.decision; none, when it has none). Left out, each takes its value in the
        Predictor's options."""
        batch_size = self.options.batch_size if batch_size is None else require_int("batch_size", batch_size, 1)
        threshold = self.abstain_below if abstain_below is None else self.check_abstain_below(abstain_below)
        truncation = truncation or self.options.truncation
        texts = check_texts(texts)
        if text_pair is not None:
            text_pair = check_texts(text_pair, "second text {}")
        if truncation not in (None, *TRUNCATIONS):
            raise UserError(f"truncation '{truncation}': choose one of {', '.join(TRUNCATIONS)}")
        self.check_text_pair(texts, text_pair, truncation)
        truncation = truncation or self.meta.truncation
        if not texts:
            return []
        ids, types, truncated, documents = (*self._encode_pairs(texts, text_pair), None) if text_pair is not None else \
            self._encode(texts, truncation)
        order = np.argsort([-len(x) for x in ids], kind="stable")  # similar lengths share a batch
        logits = np.zeros((len(ids), len(self.labels)), dtype=np.float32)  # a row per text, or per window
        for start, end in self.engines.calls([len(ids[i]) for i in order], batch_size):
            chosen = order[start:end]
            input_ids, token_type_ids = pad_ids([ids[i] for i in chosen], [types[i] for i in chosen],
                                                self.tokenizer.pad_token_id)
            logits[chosen] = self.run(input_ids, token_type_ids)
        if documents is None:
            windows = np.ones(len(texts), dtype=np.int64)
        else:
            logits = pool_windows(logits, documents, self.meta.window_pooling)
            windows = np.bincount(documents, minlength=len(texts))
        return [self._prediction(row, cut, int(count)).deciding(threshold)
                for row, cut, count in zip(logits, truncated, windows)]

    def check_abstain_below(self, abstain_below: float | None) -> float | None:
        """The threshold a request asks for (checked), else the model's own."""
        if abstain_below is None:
            return self.meta.abstain_below
        if self.meta.multi_label:
            raise UserError("abstain_below: a multi-label model answers with the labels over their thresholds; "
                            "leave it out")
        if isinstance(abstain_below, bool) or not isinstance(abstain_below, (int, float)) \
                or not 0 <= abstain_below <= 1:
            raise UserError(f"abstain_below={abstain_below!r}: give a probability from 0 to 1")
        return float(abstain_below)

    def _prediction(self, logits: np.ndarray, truncated: bool, windows: int) -> Prediction:
        """One text's `Prediction` from its (pooled) logits [labels]."""
        if not self.meta.multi_label:
            probs = softmax(logits / self.meta.temperature)  # 1 unless calibrated at training
            return Prediction(self.meta.labels, probs.astype(np.float64), truncated, windows,
                              hierarchy=self.meta.hierarchy)
        probs = sigmoid(logits).astype(np.float64)
        chosen = np.flatnonzero(probs >= self._thresholds)
        chosen = chosen[np.lexsort((chosen, -probs[chosen]))]  # most probable first
        return Prediction(self.meta.labels, probs, truncated, windows, tuple(self.meta.labels[i] for i in chosen))

    def check_text_pair(self, texts: list[str], text_pair: list[str] | None, truncation: str | None = None) -> None:
        """Second texts where, and only where, the model was trained on pairs; one per text."""
        if self.takes_text_pair and text_pair is None:
            raise UserError("this model classifies text pairs: give a second text for each text (--text-pair, "
                            "a text_pair column, or text_pair over HTTP)")
        if not self.takes_text_pair and text_pair is not None:
            raise UserError("this model classifies single texts: send no second texts")
        if text_pair is not None and len(text_pair) != len(texts):
            raise UserError(f"{len(texts)} texts but {len(text_pair)} second texts: give one second text per text")
        if text_pair is not None and truncation not in (None, "head"):
            raise UserError("a text pair is cut longest-first, as in training: truncation applies to single texts")

    def truncation_rule(self, truncation: str | None = None) -> Truncation:
        """How a text longer than max_length is read: as training read it, or by the rule `truncation` names."""
        trained = self.meta.truncation_rule
        if truncation is None or truncation == trained.mode:
            return trained
        # head_tail asked for on a model trained otherwise: half the text from each end
        return replace(trained, mode=truncation, head_tokens=(self.max_length - 2) // 2)

    def _encode(self, texts: list[str], truncation: str):
        """(input_ids, token_type_ids, truncated, documents): a row per text ([CLS] body [SEP], the body cut as
        `truncation` says; documents None), or with sliding_window a row per window, `documents` [rows] giving
        the text of each."""
        rule = self.truncation_rule(truncation)
        read = [rule.characters_read(text, self.max_length) for text in texts]
        cut_short = [len(part) < len(text) for part, text in zip(read, texts)]
        if truncation == "head" and isinstance(self.tokenizer, FastTokenizer):
            ids, types, truncated = self.tokenizer.encode(read, max_length=self.max_length)
            return ids, types, [a or b for a, b in zip(truncated, cut_short)], None
        whole = self.tokenizer(read, max_length=None, truncation=False)["input_ids"]
        ids, documents = rule.apply(whole, self.max_length)
        truncated = [len(x) > self.max_length or short for x, short in zip(whole, cut_short)]
        return ids, [[0] * len(x) for x in ids], truncated, documents

    def _encode_pairs(self, texts: list[str], pairs: list[str]):
        head = Truncation("head")  # longest-first keeps the head of each text
        texts = [head.characters_read(text, self.max_length) for text in texts]
        pairs = [head.characters_read(pair, self.max_length) for pair in pairs]
        if isinstance(self.tokenizer, FastTokenizer):
            return self.tokenizer.encode(texts, pairs, max_length=self.max_length)
        whole = self.tokenizer(list(texts), text_pair=list(pairs), max_length=None, truncation=False)["input_ids"]
        encoded = self.tokenizer(list(texts), text_pair=list(pairs), max_length=self.max_length, truncation=True)
        return (encoded["input_ids"], encoded["token_type_ids"],
                [len(full) > self.max_length for full in whole])


@dataclass(frozen=True, eq=False)
class Prediction:
    """What the model says about one text; `predict`, `Classifier` and the HTTP service only format it."""

    names: tuple[str, ...]
    """The model's label names, in class-id order."""
    vector: np.ndarray
    """[labels] every label's probability, in class-id order (multi-label: each label's own, not summing to 1).
    Kept as an array: a model of 20,000 labels would cost a dict of 20,000 entries per text."""
    truncated: bool
    """The text was longer than the model's max_length and was cut (or cut into windows)."""
    windows: int = 1
    """The windows of max_length the text was read in (more than 1 only with sliding_window)."""
    labels: tuple[str, ...] | None = None
    """A multi-label model's answer: the labels at or above their thresholds, most probable first (maybe
    none); None from a single-label model."""
    abstained: bool | None = None
    """A single-label model under an abstain threshold: its top probability is below it, so a person should decide
    (the top label is still given); None where no threshold applies."""
    hierarchy: Hierarchy | None = None
    """A single-label model's tree of labels, when they are paths (data.label_hierarchy)."""
    answer: tuple[str, float] | None = None
    """Under an abstain threshold, with a tree: the deepest sure node (the leaf, else a parent); None if none is."""

    def deciding(self, abstain_below: float | None) -> Prediction:
        """This prediction under an abstain threshold (None: none)."""
        if abstain_below is None or self.labels is not None:
            return replace(self, abstained=None, answer=None)
        answer = None if self.hierarchy is None else self.hierarchy.answer(self.vector, abstain_below)
        return replace(self, abstained=self.score < abstain_below, answer=answer)

    def __eq__(self, other) -> bool:
        """The same answer about the same text: every field equal, the probabilities exactly."""
        def fields(p: Prediction) -> tuple:
            tree = None if p.hierarchy is None else (p.hierarchy.leaves, p.hierarchy.separator)
            return p.names, p.truncated, p.windows, p.labels, p.abstained, tree, p.answer

        return isinstance(other, Prediction) and fields(self) == fields(other) and \
            np.array_equal(self.vector, other.vector)

    __hash__ = None

    @property
    def probabilities(self) -> dict[str, float]:
        """{label: probability} of every label, in class-id order."""
        return dict(zip(self.names, self.vector.tolist()))

    def top(self, k: int) -> list[tuple[str, float]]:
        """The `k` most probable (label, probability), best first; ties keep class-id order."""
        require_int("k", k, 1, len(self.names))
        # those at or above the k-th largest (linear in the labels), then sorted among themselves
        kth = np.partition(self.vector, len(self.names) - k)[len(self.names) - k]
        chosen = np.flatnonzero(self.vector >= kth)
        chosen = chosen[np.lexsort((chosen, -self.vector[chosen]))][:k]
        return [(self.names[i], float(self.vector[i])) for i in chosen]

    @property
    def label(self) -> str:
        return self.names[int(np.argmax(self.vector))]  # argmax: the first of equal ones, as top()

    @property
    def score(self) -> float:
        return float(np.max(self.vector))

    def shown_probabilities(self) -> dict[str, float]:
        """What an answer lists: every label's probability, or of a model of more than `ALL_PROBABILITIES` labels
        the `TOP_PROBABILITIES` most probable ones, best first (an answer of 20,000 numbers per text helps no one)."""
        if len(self.names) <= ALL_PROBABILITIES:
            return self.probabilities
        return dict(self.top(TOP_PROBABILITIES))

    def tree_fields(self) -> dict:
        """With a tree of labels: the top label's `path` (each level's node and probability) and, under a threshold,
        the `answer` of the deepest level that is sure (None if none is); {} without a tree."""
        if self.hierarchy is None:
            return {}
        fields = {"path": [{"label": node, "score": p} for node, p in self.hierarchy.path(self.vector)]}
        if self.abstained is not None:
            fields["answer"] = None if self.answer is None else dict(zip(("label", "score"), self.answer))
        return fields

    def as_dict(self, top_k: int | None = None) -> dict:
        """The answer about one text as every interface gives it (predict's rows, Ray's shards, `Classifier`, HTTP):
        the top label and its probability (a multi-label model: its label set), "abstained" under a threshold, a
        tree's path and answer, the probabilities shown (`shown_probabilities`), whether the text was cut and in how
        many windows it was read; with `top_k` > 1 also the `top_k` most probable labels, best first."""
        answer = {"label": self.label, "score": self.score} if self.labels is None else {"labels": list(self.labels)}
        decided = {} if self.abstained is None else {"abstained": self.abstained}
        ranked = {"top_k": [{"label": label, "score": score} for label, score in self.top(top_k)]} \
            if top_k is not None and top_k > 1 else {}
        return {**answer, **decided, **self.tree_fields(), "probabilities": self.shown_probabilities(),
                "truncated": self.truncated, "windows": self.windows, **ranked}


def stack_probabilities(predictions: list[Prediction]) -> np.ndarray:
    """[len(predictions), num_classes] probabilities, class ids in order (for comparing models)."""
    return np.array([p.vector for p in predictions], dtype=np.float32)


def check_device(device: str, precision: str) -> None:
    """Refuse a device/precision this machine or this paddle build cannot run (Paddle would fall back
    silently or fail later)."""
    if precision not in PRECISIONS.get(device, ()):
        raise UserError(f"precision '{precision}' on device '{device}': choose one of "
                        f"{', '.join(f'{d}: {p}' for d, ps in PRECISIONS.items() for p in ps)}")
    if device == "cpu" and precision == "bf16" and not cpu_supports_bf16():
        # Paddle would quietly run fp32 instead; say so rather than pretend
        raise UserError("precision 'bf16' needs a CPU with AVX512-BF16 or AMX-BF16, and this one has neither; "
                        "use --precision fp32")
    if device == "gpu":
        import paddle

        if not paddle.is_compiled_with_cuda():
            raise UserError("device 'gpu' asked for, but this paddle build has no CUDA: install paddlepaddle-gpu "
                            "or use --device cpu")


def check_tensorrt(program: Path, device: str) -> None:
    """TensorRT through Paddle Inference's `enable_tensorrt_engine` applies to `.pdmodel` programs only;
    a Paddle 3 export is a PIR `model.json`, for which it is silently ignored (the run would be plain
    GPU fp32 labelled TensorRT). Refuse instead of pretending."""
    if device != "gpu":
        raise UserError("TensorRT needs --device gpu")
    if program.suffix == ".json":
        raise UserError(f"--tensorrt: {program} is a Paddle 3 (PIR) program, which Paddle Inference's TensorRT "
                        "engine does not run (it takes .pdmodel programs only); use --device gpu --precision fp16 "
                        "without --tensorrt")
