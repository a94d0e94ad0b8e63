"""`ModelMeta`: what a trained classifier must remember about its inputs and labels, and the one reader and
writer of `paddle_ft.json`. A saved model (`OUT/best/paddle_ft.json`, see `bundle`) and an export (`export.json`,
key "model", see `export_folder`) carry the same one.

Imports neither Paddle nor the config nor the data readers, so the inference side reads it too.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from paddle_ft.errors import UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.models.hierarchy import Hierarchy, hierarchy_of
from paddle_ft.text import HEADS, POOLINGS, TASKS, TRUNCATIONS, WINDOW_POOLINGS, Truncation

FORMAT_VERSION = 2
"""Layout of the metadata files; a folder of another layout is refused with how to make it again."""
MODEL_META = "paddle_ft.json"
RETRAIN = "train the model again"


@dataclass(frozen=True)
class Decision:
    """What the dev evaluation fitted, fixed for test and kept in best/ (as `ModelMeta`'s fields of the same names):
    a multi-label model's thresholds, the calibrated temperature, the confidence below which the model abstains.
    None: not fitted (the model's defaults stand)."""

    thresholds: tuple[float, ...] | None = None
    temperature: float | None = None
    abstain_below: float | None = None

    @classmethod
    def from_report(cls, report: dict | None, labels) -> Decision:
        """The decision a dev evaluation's report holds (None: no dev, nothing fitted): the one place that knows
        where each part sits in a report."""
        report = report or {}
        thresholds = report.get("thresholds")
        return cls(None if thresholds is None else tuple(thresholds[name] for name in labels),
                   report.get("temperature"), report.get("decision", {}).get("abstain_below"))


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
    header: bool = True
    """TSV/CSV: whether the files training read began with a header row (else columns are named "1", "2", ...)."""
    dropout: float = 0.1
    """Dropout before the classifier (training only; the head is rebuilt with it)."""
    pooling: str = "pooler"
    """How the head takes the text's vector: pooler, cls or mean (config model.pooling)."""
    head: str = "linear"
    """The classifier head: linear, or prototype (cosine to a prototype per class, model.head)."""
    text_prefix: str = ""
    """Put before every text the model reads (model.text_prefix: an embedding model's instruction)."""
    truncation: str = "head"
    """What training did with a long single text (config data.truncation: head, tail, head_tail or
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
    label_hierarchy: str | None = None
    """What separates the levels of labels written as paths of a tree (data.label_hierarchy); None = flat."""
    temperature: float = 1.0
    """single_label: the logits are divided by it before the softmax (train.calibration temperature, fitted on
    dev); 1 = the probabilities as trained."""
    abstain_below: float | None = None
    """single_label: the model abstains (answers with "abstained": true) when its top probability is below this
    (train.decision, fitted on dev); None = it always answers."""
    format_version: int = FORMAT_VERSION
    """Layout of the metadata (`FORMAT_VERSION`)."""

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @cached_property
    def hierarchy(self) -> Hierarchy | None:
        """The tree of the labels, when they are paths (data.label_hierarchy)."""
        return hierarchy_of(self.labels, self.label_hierarchy)

    @property
    def truncation_rule(self) -> Truncation:
        return Truncation.of(self)

    @property
    def takes_text_pair(self) -> bool:
        return self.text_pair_column is not None

    @property
    def multi_label(self) -> bool:
        return self.task == "multi_label"

    @property
    def label_thresholds(self) -> tuple[float, ...]:
        """multi_label: the threshold of each label, in label order."""
        return self.thresholds if self.thresholds is not None else (0.5,) * len(self.labels)

    def deciding(self, decision: Decision) -> ModelMeta:
        """This metadata with what `decision` fitted (its None parts leave the fields as they are)."""
        fitted = {name: value for name, value in dataclasses.asdict(decision).items() if value is not None}
        return dataclasses.replace(self, **fitted)

    def reads_differently_from(self, other: ModelMeta) -> list[str]:
        """How a model made with `other`'s metadata would read texts or name answers unlike this one, as
        `config key: this, other` (a teacher and its student, a run and its resume): what to set to match."""
        fields = [("task", self.task, other.task), ("data.labels", list(self.labels), list(other.labels)),
                  ("data.text_pair_column", self.takes_text_pair and "set", other.takes_text_pair and "set"),
                  ("data.truncation", self.truncation, other.truncation)]
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
            ("header", isinstance(meta.header, bool)),
            ("temperature", isinstance(meta.temperature, (int, float)) and meta.temperature > 0),
            ("abstain_below", meta.abstain_below is None or (isinstance(meta.abstain_below, (int, float))
                                                             and 0 <= meta.abstain_below <= 1 and not meta.multi_label)),
            ("head_tokens", isinstance(meta.head_tokens, int)
             and (meta.truncation != "head_tail" or 0 < meta.head_tokens < meta.max_length - 2)),
            ("stride", isinstance(meta.stride, int) and 0 < meta.stride),
            ("window_pooling", meta.window_pooling in WINDOW_POOLINGS),
            ("pooling", meta.pooling in POOLINGS), ("head", meta.head in HEADS),
            ("text_prefix", isinstance(meta.text_prefix, str)),
            ("format_version", meta.format_version == FORMAT_VERSION)) if not ok]
        if problems:
            raise UserError(f"{source} is damaged or from a newer paddle_ft ({', '.join(problems)}); {fix}")
        return meta


def write_model_meta(meta: ModelMeta, directory: Path) -> None:
    write_json(directory / MODEL_META, meta.as_dict())


def is_model_folder(directory: Path) -> bool:
    """A folder a training run saved a model into (its metadata marks it)."""
    return (directory / MODEL_META).is_file()


def read_model_meta(directory: Path) -> ModelMeta:
    """The `ModelMeta` of a saved model folder."""
    path = directory / MODEL_META
    if not path.is_file():
        raise UserError(f"{directory} is not a paddle_ft model directory (no {MODEL_META}); pass the best/ folder a "
                        "training run wrote")
    return ModelMeta.from_dict(read_json(path, RETRAIN), path, RETRAIN)


def write_json(path: Path, data: dict) -> None:
    write_text_atomically(path, json.dumps(data, ensure_ascii=False, indent=2))


def read_json(path: Path, fix: str) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise UserError(f"{path} is damaged (not JSON); {fix}") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} is damaged (not a JSON object); {fix}")
    return value
