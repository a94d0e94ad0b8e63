"""Typed metadata of the two folders a model lives in, and the one reader and writer of each file.

- `ModelMeta`: what a trained classifier must remember about its inputs and labels. A saved model
  (`OUT/best/paddle_ft.json`, see `bundle`) and an export (`export.json`, key "model") carry the same one.
- `ExportInfo`: `export.json` of an exported folder: the `ModelMeta` plus what the export itself proved.

Imports no Paddle, so `Predictor` reads an export without Paddle's training code.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from paddle_ft.config import LONG_TEXTS, POOLINGS, TASKS, WINDOW_POOLINGS
from paddle_ft.data.features import Truncation
from paddle_ft.data.readers import Columns
from paddle_ft.errors import UserError
from paddle_ft.io import write_text_atomically

FORMAT_VERSION = 2
"""1: paddle_ft 0.1 (untyped paddle_ft.json, labels only in label_map.json); 2: `ModelMeta`."""
TRUNCATIONS = LONG_TEXTS
MODEL_META = "paddle_ft.json"
EXPORT_INFO = "export.json"
REEXPORT = "re-create it with tools/export.py --model OUT/best --output DIR"
RETRAIN = "train the model again"


@dataclass(frozen=True)
class ModelMeta:
    """How a classifier reads its input and names its output."""

    labels: tuple[str, ...]
    """Label names in class-id order."""
    max_length: int
    """Tokens per text (pair) after truncation, [CLS] and [SEP] included."""
    text_column: str = "text"
    """Column (or JSONL key) of the text, in the files training read."""
    text_pair_column: str | None = None
    """Column of the second text; set exactly when the model classifies text pairs."""
    label_column: str = "label"
    """Column of the label name."""
    format: str = "tsv"
    """File format training read (eval reads a file of the same kind unless its suffix says otherwise)."""
    dropout: float = 0.1
    """Dropout before the classifier (training only; the head is rebuilt with it)."""
    pooling: str = "pooler"
    """How the head takes the text's vector: pooler, cls or mean (config model.pooling)."""
    truncation: str = "head"
    """What training did with a long single text (config data.long_text: head, tail, head_tail or
    sliding_window); the exported model and the Predictor do the same (a text pair is cut longest-first)."""
    head_tokens: int = 64
    """With head_tail truncation: the kept tokens that come from the text's beginning."""
    stride: int = 64
    """With sliding_window truncation: tokens between the starts of a long text's windows."""
    window_pooling: str = "mean"
    """With sliding_window truncation: how the windows' logits are pooled (mean or max)."""
    task: str = "single_label"
    """single_label: one label per text (softmax); multi_label: a set of labels (a sigmoid per label)."""
    thresholds: tuple[float, ...] | None = None
    """multi_label: each label's probability threshold, in label order (tuned on dev); None = 0.5 for all."""
    label_delimiter: str = ","
    """multi_label: what separates the label names in the label column of the files training read."""
    allow_no_label: bool = False
    """multi_label: a labelled row may have no label at all."""
    temperature: float = 1.0
    """single_label: the logits are divided by it before the softmax (train.calibration temperature, fitted on
    dev); 1 = the probabilities as trained."""
    format_version: int = FORMAT_VERSION
    """Layout of the metadata; older ones are read by `_upgrade`."""

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def truncation_rule(self) -> Truncation:
        return Truncation(self.truncation, self.head_tokens, self.stride, self.window_pooling)

    @property
    def takes_pairs(self) -> bool:
        return self.text_pair_column is not None

    @property
    def multi_label(self) -> bool:
        return self.task == "multi_label"

    @property
    def columns(self) -> Columns:
        """How to read a labelled file of the kind training read (eval, quantize's accuracy check)."""
        return Columns(self.text_column, self.text_pair_column, self.label_column,
                       self.label_delimiter if self.multi_label else None, self.allow_no_label)

    @property
    def label_thresholds(self) -> tuple[float, ...]:
        """multi_label: the threshold of each label, in label order."""
        return self.thresholds if self.thresholds is not None else (0.5,) * len(self.labels)

    def reads_differently_from(self, other: ModelMeta) -> list[str]:
        """How a model made with `other`'s metadata would read texts or name answers unlike this one, as
        `config key: this, other` (a teacher and its student, a run and its resume): what to set to match."""
        fields = [("task", self.task, other.task), ("data.labels", list(self.labels), list(other.labels)),
                  ("data.text_pair_column", self.takes_pairs and "set", other.takes_pairs and "set"),
                  ("data.long_text", self.truncation, other.truncation)]
        if self.truncation == other.truncation == "head_tail":
            fields.append(("data.head_tokens", self.head_tokens, other.head_tokens))
        return [f"{key}: {mine or 'none'}, {theirs or 'none'}" for key, mine, theirs in fields if mine != theirs]

    def as_dict(self) -> dict:
        thresholds = None if self.thresholds is None else list(self.thresholds)
        return {**dataclasses.asdict(self), "labels": list(self.labels), "thresholds": thresholds}

    @classmethod
    def from_dict(cls, data: dict, source: Path, fix: str) -> ModelMeta:
        """Checked fields of `data` (read from `source`); one line naming the file and `fix` when they are
        wrong."""
        try:
            thresholds = data.get("thresholds")
            meta = cls(**{**data, "labels": tuple(data["labels"]),
                          "thresholds": tuple(thresholds) if isinstance(thresholds, list) else thresholds})
        except (TypeError, KeyError):
            raise UserError(f"{source} is damaged (its fields are not a paddle_ft model's); {fix}") from None
        problems = [name for name, ok in (
            ("labels", len(meta.labels) >= 2 and all(isinstance(x, str) for x in meta.labels)
             and len(set(meta.labels)) == len(meta.labels)),
            ("max_length", isinstance(meta.max_length, int) and meta.max_length >= 2),
            ("task", meta.task in TASKS), ("truncation", meta.truncation in TRUNCATIONS),
            ("thresholds", meta.thresholds is None or (
                len(meta.thresholds) == len(meta.labels) and meta.multi_label
                and all(isinstance(t, (int, float)) and 0 <= t <= 1 for t in meta.thresholds))),
            ("label_delimiter", isinstance(meta.label_delimiter, str) and meta.label_delimiter.strip() != ""),
            ("temperature", isinstance(meta.temperature, (int, float)) and meta.temperature > 0),
            ("head_tokens", isinstance(meta.head_tokens, int)
             and (meta.truncation != "head_tail" or 0 < meta.head_tokens < meta.max_length - 2)),
            ("stride", isinstance(meta.stride, int) and 0 < meta.stride),
            ("window_pooling", meta.window_pooling in WINDOW_POOLINGS),
            ("pooling", meta.pooling in POOLINGS),
            ("format_version", meta.format_version == FORMAT_VERSION)) if not ok]
        if problems:
            raise UserError(f"{source} is damaged or from a newer paddle_ft ({', '.join(problems)}); {fix}")
        return meta


def write_model_meta(meta: ModelMeta, directory: Path) -> None:
    _write_json(directory / MODEL_META, meta.as_dict())


def read_model_meta(directory: Path) -> ModelMeta:
    """The `ModelMeta` of a saved model folder; a paddle_ft 0.1 folder is read through `_upgrade`."""
    path = directory / MODEL_META
    if not path.is_file():
        raise UserError(f"{directory} is not a paddle_ft model directory (no {MODEL_META}); pass the best/ folder a "
                        "training run wrote")
    data = _read_json(path, RETRAIN)
    if "format_version" not in data:
        data = _upgrade(data, directory, path)
    return ModelMeta.from_dict(data, path, RETRAIN)


def _upgrade(data: dict, directory: Path, path: Path) -> dict:
    """paddle_ft 0.1 wrote num_classes and no labels (those were only in label_map.json)."""
    from paddle_ft.data.labels import LabelMap

    labels = LabelMap.load(directory).names
    if data.get("num_classes") != len(labels):
        raise UserError(f"{path} says {data.get('num_classes')} classes but label_map.json has {len(labels)}; "
                        f"the folder is damaged: {RETRAIN}")
    known = {f.name for f in dataclasses.fields(ModelMeta)}
    return {**{k: v for k, v in data.items() if k in known}, "labels": list(labels), "format_version": FORMAT_VERSION}


@dataclass(frozen=True)
class ExportInfo:
    """`export.json`: the model's metadata and what the export wrote and proved."""

    model: ModelMeta
    program_file: str
    """model.json (Paddle 3, PIR) or model.pdmodel (Paddle 2.6)."""
    paddle_version: str
    source_model: str
    """The saved-model folder it was exported from."""
    inputs: tuple[str, ...] = ("input_ids", "token_type_ids")
    files: tuple[str, ...] = ()
    """Every file the export wrote besides export.json: what --overwrite may replace."""
    parity_max_abs_diff: float | None = None
    """Largest |logit| difference of the exported graph (CPU predictor) from dygraph."""
    parity_max_abs_diff_gpu: float | None = None
    """The same on the GPU predictor, where a GPU was visible at export."""
    onnx_file: str | None = None
    """model.onnx: the same graph for ONNX Runtime (None when export could not write one, and why in extra)."""
    parity_max_abs_diff_onnx: float | None = None
    """Largest |logit| difference of the ONNX graph (ONNX Runtime) from dygraph."""
    quantization: dict | None = None
    """Set by `paddle_ft quantize`: model.onnx is int8 (served by ONNX Runtime only; the Paddle graph beside it is
    the fp32 one), with how it was quantized and the accuracy check it passed."""
    extra: dict = field(default_factory=dict)
    """Keys of a newer paddle_ft, kept as they are."""

    def as_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**self.extra, **data, "model": self.model.as_dict(), "inputs": list(self.inputs),
                "files": list(self.files), "format_version": FORMAT_VERSION}


def write_export_info(info: ExportInfo, directory: Path) -> None:
    _write_json(directory / EXPORT_INFO, info.as_dict())


def read_export_info(directory: Path) -> ExportInfo:
    """`export.json` of an exported folder, checked; an export of paddle_ft 0.1 is upgraded where it says
    enough (whether it takes text pairs), else refused with how to re-export."""
    path = directory / EXPORT_INFO
    if not path.is_file():
        raise UserError(f"{path} is missing: {directory} is not a complete export; {REEXPORT}")
    data = _read_json(path, REEXPORT)
    if "format_version" not in data:
        data = _upgrade_export(data, path)
    known = {f.name for f in dataclasses.fields(ExportInfo)}
    try:
        return ExportInfo(**{k: v for k, v in data.items() if k in known - {"model", "inputs", "files", "extra"}},
                          model=ModelMeta.from_dict(data["model"], path, REEXPORT),
                          inputs=tuple(data.get("inputs", ())), files=tuple(data.get("files", ())),
                          extra={k: v for k, v in data.items() if k not in known | {"format_version"}})
    except (TypeError, KeyError, AttributeError):
        raise UserError(f"{path} is damaged (its fields are not an export's); {REEXPORT}") from None


def _upgrade_export(data: dict, path: Path) -> dict:
    if "text_pair_column" not in data:  # before 0.1.x recorded it, a pair model exported as a single-text one
        raise UserError(f"{path} is from an older paddle_ft that did not record whether the model takes text "
                        f"pairs; {REEXPORT}")
    model = {"labels": data.get("labels"), "max_length": data.get("max_length"),
             "text_pair_column": data["text_pair_column"]}
    rest = {k: v for k, v in data.items() if k not in ("labels", "max_length", "text_pair_column")}
    return {**rest, "model": model}


def _write_json(path: Path, data: dict) -> None:
    write_text_atomically(path, json.dumps(data, ensure_ascii=False, indent=2))


def _read_json(path: Path, fix: str) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise UserError(f"{path} is damaged (not JSON); {fix}") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} is damaged (not a JSON object); {fix}")
    return value
