"""Annotation tools' files: tasks paddle_ft writes for Label Studio and doccano (texts with the model's answer as a
pre-annotation), and the types of what their exports give back (read by data.annotation_exports: each tool's export
by its own module, data.label_studio_export and data.doccano_export).

Tasks written (classification projects only):
- Label Studio: a JSON list of {"data": {"text": ...}, "predictions": [{"model_version", "score", "result":
  [{"from_name", "to_name", "type": "choices", "value": {"choices": [...]}}]}]} (a tree's: "taxonomy" paths); with a
  labelling config (`label_config`) whose Choices (or Taxonomy) tag is named "label" over a Text tag named "text".
- doccano: JSONL of {"text": ..., "label": ["name", ...]}, the task's other fields as the example's metadata.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import quoteattr

from paddle_ft.data import text_files
from paddle_ft.errors import DataError, UserError
from paddle_ft.io import atomic_file, claimed

TOOLS = ("label-studio", "doccano")
FROM_NAME, TO_NAME = "label", "text"  # the control and object tags of the labelling config written with the tasks
TEXT_KEY, PAIR_KEY = "text", "text_pair"
MODEL_VERSION = "paddle_ft"
PATH_SEPARATOR = "/"  # a taxonomy path's names, as one label


@dataclass(frozen=True)
class Task:
    """A text to label, with the model's answer as its pre-annotation."""
    text: str
    text_pair: str | None
    labels: tuple[str, ...]
    score: float
    fields: dict = field(default_factory=dict)
    """Kept with the task and given back by its export: where the text came from (line; a review's file, line,
    given and suggested labels), how it was chosen (the selection's score)."""


@dataclass(frozen=True)
class Labelled:
    """A text and the labels a person chose in the tool, with the fields its task carried."""
    text: str
    text_pair: str | None
    labels: tuple[str, ...]
    fields: dict


@dataclass
class ImportReport:
    unlabelled: int = 0
    """Tasks without an answer (none, or every one skipped/cancelled): left out."""
    disagreeing: list = field(default_factory=list)
    """Tasks whose annotators chose differently: the most recent annotation kept."""
    unsettled: list = field(default_factory=list)
    """Examples whose annotators chose differently where the export does not say which came last (doccano's files
    per annotator): left out."""


@dataclass(frozen=True)
class LabelSpace:
    """What a model answers, as a labelling config shows it."""
    names: tuple[str, ...]
    multi_label: bool = False
    path_separator: str | None = None
    """Labels written as paths of a tree (data.label_hierarchy): Label Studio shows them as a Taxonomy."""

    @classmethod
    def of_model(cls, meta) -> LabelSpace:
        """A trained model's (its ModelMeta: labels, multi_label, label_hierarchy)."""
        return cls(meta.labels, meta.multi_label, meta.label_hierarchy)

    def result(self, labels: tuple[str, ...]) -> dict:
        """A Label Studio result choosing `labels`."""
        if self.path_separator is None:
            return {"from_name": FROM_NAME, "to_name": TO_NAME, "type": "choices", "value": {"choices": list(labels)}}
        paths = [label.split(self.path_separator) for label in labels]
        return {"from_name": FROM_NAME, "to_name": TO_NAME, "type": "taxonomy", "value": {"taxonomy": paths}}


def write_tasks(path: Path, tool: str, tasks: list[Task], space: LabelSpace) -> list[Path]:
    """The tasks as `tool` imports them; for Label Studio also the labelling config beside them. Returns the files."""
    if tool == "doccano":
        if any(t.text_pair is not None for t in tasks):
            raise UserError("doccano's document-classification tasks hold one text: a text-pair model's tasks go to "
                            "Label Studio (--to label-studio)")
        with atomic_file(path) as out:
            out.writelines(json.dumps({**t.fields, TEXT_KEY: t.text, "label": list(t.labels)}, ensure_ascii=False)
                           + "\n" for t in tasks)
        return [path]
    records = [{"data": {**t.fields, TEXT_KEY: t.text, **({PAIR_KEY: t.text_pair} if t.text_pair is not None else {})},
                "predictions": [{"model_version": MODEL_VERSION, "score": round(t.score, 6),
                                 "result": [space.result(t.labels)]}]} for t in tasks]
    config = label_config_path(path)
    with claimed(path, "--output-file"):  # the pair is written by one process at a time
        check_tasks_output(path, tool)
        with atomic_file(path) as out:
            json.dump(records, out, ensure_ascii=False, indent=1)
        with atomic_file(config) as out:
            out.write(label_config(space, any(t.text_pair is not None for t in tasks)))
    return [path, config]


def label_config_path(tasks_path: Path) -> Path:
    return tasks_path.with_name(tasks_path.stem + ".label_config.xml")


def check_tasks_output(path: Path, tool: str) -> None:
    """The file Label Studio's tasks are written to names a second one, its labelling config, which the user did not
    name: it may replace only a config paddle_ft wrote (a user's own user.label_config.xml was replaced)."""
    config = label_config_path(path)
    if tool != "label-studio" or not (config.exists() or config.is_symlink()):
        return
    try:
        ours = config.is_file() and not config.is_symlink() and \
            config.read_text(encoding="utf-8").startswith(_LABEL_CONFIG_START)
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise UserError(f"--output-file {path}: its labelling config goes to {config}, which holds a file paddle_ft "
                        "did not write; move that file away, or give the tasks another name")


_LABEL_CONFIG_START = f'<View>\n  <Text name="{TO_NAME}" value="${TEXT_KEY}"/>'  # how every config written starts


def label_config(space: LabelSpace, text_pair: bool) -> str:
    """Label Studio's labelling config for these tasks: paste it in the project's Settings > Labeling Interface. A
    tree's labels are a Taxonomy (a path chosen by its leaf), flat ones Choices."""
    pair = f'\n  <Text name="{PAIR_KEY}" value="${PAIR_KEY}"/>' if text_pair else ""
    if space.path_separator is None:
        choices = "\n".join(f"    <Choice value={quoteattr(name)}/>" for name in space.names)
        control = (f'  <Choices name="{FROM_NAME}" toName="{TO_NAME}" '
                   f'choice="{"multiple" if space.multi_label else "single"}" showInline="true">\n{choices}\n'
                   '  </Choices>')
    else:
        tree = _tree([name.split(space.path_separator) for name in space.names])
        once = "" if space.multi_label else ' maxUsages="1"'  # a single-label tree: one path a text
        control = (f'  <Taxonomy name="{FROM_NAME}" toName="{TO_NAME}" leafsOnly="true"{once}>\n'
                   f'{_taxonomy_choices(tree, 2)}\n  </Taxonomy>')
    return f"{_LABEL_CONFIG_START}{pair}\n{control}\n</View>\n"


def _tree(paths: list[list[str]]) -> dict:
    """{name: {child: {...}}} of the label paths, in the order the names first appear."""
    root: dict = {}
    for parts in paths:
        node = root
        for part in parts:
            node = node.setdefault(part, {})
    return root


def _taxonomy_choices(tree: dict, depth: int) -> str:
    indent = "  " * depth
    return "\n".join(f"{indent}<Choice value={quoteattr(name)}/>" if not children else
                     f"{indent}<Choice value={quoteattr(name)}>\n{_taxonomy_choices(children, depth + 1)}\n"
                     f"{indent}</Choice>" for name, children in tree.items())


def json_list(path: Path, tool: str, fix: str) -> list:
    """A whole-file JSON export that must be a list of objects."""
    data = text_files.read_json(path, fix)
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise DataError(str(path), None, f"a {type(data).__name__} where {tool}'s JSON export is a list of objects; "
                                         f"{fix}")
    return data
