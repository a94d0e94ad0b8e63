"""`LabelMap`: the fixed mapping between label names and class ids, saved as `label_map.json`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from paddle_ft.data import text_files
from paddle_ft.errors import ConfigError, DataError, UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.tokenization.readable import NO_TOKEN, readable

LABEL_MAP_FILE = "label_map.json"


class LabelMap:
    def __init__(self, names: Iterable[str]):
        self.names = tuple(names)
        if len(set(self.names)) != len(self.names):
            raise UserError(f"duplicate label names in {list(self.names)}")
        if len(self.names) < 2:
            raise UserError(f"a classifier needs at least 2 labels, got {list(self.names)}; give data.labels or "
                            "training data with two labels or more")
        self._ids = {name: i for i, name in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other) -> bool:
        return isinstance(other, LabelMap) and self.names == other.names

    def id(self, name: str) -> int:
        return self._ids[name]

    def name(self, class_id: int) -> str:
        return self.names[class_id]

    def save(self, directory: Path) -> None:
        # label name -> id, in id order
        text = json.dumps(self._ids, ensure_ascii=False, indent=2)
        write_text_atomically(directory / LABEL_MAP_FILE, text)

    @classmethod
    def load(cls, directory: str | Path) -> "LabelMap":
        path = Path(directory) / LABEL_MAP_FILE
        if not path.is_file():
            raise UserError(f"{path} not found: the model folder is incomplete, re-run training or export")
        try:
            ids = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise UserError(f"{path} is damaged (not JSON); re-run training or export") from None
        if not isinstance(ids, dict) or sorted(v for v in ids.values() if isinstance(v, int)) != list(range(len(ids))):
            raise UserError(f"{path} is damaged (not label names numbered 0..n-1); re-run training or export")
        return cls(sorted(ids, key=ids.get))


def resolve_labels(labels: tuple[str, ...] | str | None, train_labels: Iterable[str] | None) -> LabelMap:
    """Label set from `data.labels` (a list or a file of names), else the sorted names seen in train."""
    if isinstance(labels, tuple):
        return _label_map(labels, "the list in data.labels")
    if isinstance(labels, str):
        path = Path(labels)
        if not path.is_file():
            raise ConfigError("data.labels", f"label file {path} not found; give a file with one label per "
                              "line, a list, or null to take labels from train")
        try:
            names = [line.strip() for _, line in text_files.text_lines(path) if line.strip()]
        except DataError as exc:
            raise ConfigError("data.labels", str(exc)) from None
        return _label_map(names, f"the label file {path}")
    if train_labels is None:
        raise ConfigError("data.labels", "needed when there is no training file to take labels from")
    return _label_map(sorted(set(train_labels)), "the training file (data.train)")


def _label_map(names, source: str) -> LabelMap:
    try:
        return LabelMap(names)
    except UserError as exc:
        raise ConfigError("data.labels", f"{source}: {exc}") from None


def read_label_descriptions(path: str | Path, key: str = "data.label_descriptions") -> dict[str, str]:
    """{label name: description}, in the file's order, from lines of `name<TAB>description` (read by the shared
    rules of `text_files`: a line starting with # is a label like any other; blank lines are skipped). Every problem
    is one line naming the file and line."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(key, f"{path} does not exist; give a file of a label name, a tab and its description per "
                          "line")
    descriptions: dict[str, str] = {}
    for number, line in text_files.text_lines(path):
        if not line.strip():
            continue
        name, tab, description = line.partition("\t")
        name, description = name.strip(), description.strip()
        if not tab or not name or not description:
            raise UserError(f"{path}:{number}: expected a label name, a tab and a short description of the label "
                            f"(as: 正面<TAB>顾客满意的好评), got {line.strip()[:60]!r}")
        unreadable = next((what for what, text in (("label name", name), ("description", description))
                           if not readable(text)), None)
        if unreadable:  # train would refuse it later, after init had written a config holding it
            raise UserError(f"{path}:{number}: the {unreadable} {NO_TOKEN}")
        if name in descriptions:
            raise UserError(f"{path}:{number}: label {name!r} is described twice (first on an earlier line); keep one")
        descriptions[name] = description
    if len(descriptions) < 2:
        raise UserError(f"{path}: describes {len(descriptions)} label(s); a classifier needs two or more")
    return descriptions
