"""Label Studio's exports of a classification project, read as Label Studio 1.23.2 writes them (tests/labelling runs
the real tool; tests/data/label_studio_1.23.2 holds files it wrote):

- JSON: the tasks with their "annotations" (each a "result" list of {"from_name", "to_name", "type": "choices" or
  "taxonomy", "value"}; "completions" before 1.0): a task's latest annotation that was not skipped.
- JSON-MIN, CSV and TSV: a row per annotation (a task annotated twice is two rows under one "id", a task without an
  answer one row without an "annotation_id", a skipped one none), the data's keys beside the tool's own and each
  control tag's name holding its answer: a choice (a string), {"choices": [...]}, or a list of {"taxonomy":
  [[...]]}; in CSV and TSV a cell holds that answer as JSON text. The rows of one task are one text, its latest answer.

A taxonomy path is one label, its names joined by "/".
"""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from pathlib import Path

from paddle_ft.data import text_files
from paddle_ft.data.annotation import FROM_NAME, PAIR_KEY, PATH_SEPARATOR, TEXT_KEY, ImportReport, Labelled, json_list
from paddle_ft.errors import DataError, UserError

# JSON-MIN's own keys beside the task's data and the control tags' answers
LABEL_STUDIO_MIN_KEYS = frozenset({"id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time"})
CHOICE_TYPES = ("choices", "taxonomy")

LABEL_STUDIO_FIX = "export the Label Studio project as JSON, JSON-MIN, CSV or TSV"


def read_label_studio(path: Path, from_name: str | None, report: ImportReport) -> list[Labelled]:
    """The labelled texts of a Label Studio export, in its order."""
    if path.suffix.lower() in FLAT_SUFFIXES:
        return _flat_rows(path, _table_rows(path), from_name, report)
    items = json_list(path, "Label Studio", LABEL_STUDIO_FIX)
    if not any("data" in item for item in items):  # JSON-MIN: the flat rows as a list of objects
        return _flat_rows(path, items, from_name, report)
    rows = []
    for number, item in enumerate(items, start=1):
        where = f"{path}: task {item.get('id', number)}"
        data = item.get("data")
        if not isinstance(data, dict):
            raise UserError(f"{where}: 'data' is not an object; this is not a Label Studio JSON export")
        labels = _task_labels(where, item, from_name, report)
        if labels is None:
            report.unlabelled += 1
            continue
        text, pair = _texts(where, data)
        rows.append(Labelled(text, pair, labels, {k: v for k, v in data.items() if k not in (TEXT_KEY, PAIR_KEY)}))
    return rows


FLAT_SUFFIXES = {".csv": ",", ".tsv": "\t"}  # Label Studio's CSV and TSV exports; any other file is JSON


def _table_rows(path: Path) -> list[dict]:
    """The rows of a CSV or TSV export, each cell that holds an answer as JSON (a choices object, a taxonomy list)
    read as that answer; a cell may span lines (a text with a line break, quoted)."""
    text = "\n".join(line for _, line in text_files.text_lines(path))
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline=""), delimiter=FLAT_SUFFIXES[path.suffix.lower()]))
    except csv.Error as exc:
        raise DataError(str(path), None, f"not a table Label Studio wrote ({exc}); {LABEL_STUDIO_FIX}") from None
    if rows and None in rows[0]:
        raise DataError(str(path), 2, f"more cells than the header names; {LABEL_STUDIO_FIX}")
    return [{key: _cell(value) for key, value in row.items()} for row in rows]


def _cell(value: str | None):
    """A CSV cell: an answer Label Studio wrote as JSON text, else the text itself."""
    if value and value[0] in "{[":
        try:
            parsed = text_files.parse_json(value)
        except ValueError:
            return value
        if _is_answer(parsed):
            return parsed
    return value


def _flat_rows(path: Path, items: list[dict], from_name: str | None, report: ImportReport) -> list[Labelled]:
    """JSON-MIN, CSV and TSV: a row per annotation. The rows of one task (its "id") are one text: its latest answer
    (disagreeing annotators named in the report), or none when no row of it holds one."""
    tasks: dict[object, list[tuple[datetime, tuple[str, ...] | None, dict]]] = {}
    for number, row in enumerate(items, start=1):
        where = f"{path}: task {row.get('id', number)}"
        if not isinstance(row, dict):
            raise UserError(f"{where}: not an object; {LABEL_STUDIO_FIX}")
        if "annotation_id" in row and row["annotation_id"] in (None, ""):  # the tool's row of a task nobody answered
            labels, answer_key = None, None
        else:
            labels, answer_key = _min_labels(where, row, from_name)
        tasks.setdefault(row.get("id", f"row {number}"), []).append((_annotated_at(row), labels, row))
        if answer_key is not None:
            from_name = answer_key  # one control tag for the whole file
    rows = []
    for task_id, answers in tasks.items():
        answered = [(moment, i, labels, row) for i, (moment, labels, row) in enumerate(answers) if labels]
        if not answered:
            report.unlabelled += 1
            continue
        if len({labels for _, _, labels, _ in answered}) > 1:
            report.disagreeing.append(task_id)
        _, _, labels, row = max(answered, key=lambda a: a[:2])
        text, pair = _texts(f"{path}: task {task_id}", row)
        kept = {TEXT_KEY, PAIR_KEY, from_name, *LABEL_STUDIO_MIN_KEYS}
        rows.append(Labelled(text, pair, labels, {k: v for k, v in row.items() if k not in kept}))
    return rows


def _task_labels(where: str, task: dict, from_name: str | None, report: ImportReport) -> tuple[str, ...] | None:
    """The labels of a JSON-export task's most recent annotation that was not skipped; None without one."""
    annotations = task.get("annotations", task.get("completions"))  # "completions": Label Studio before 1.0
    if annotations is None:
        raise UserError(f"{where} has no 'annotations' (keys: {', '.join(sorted(task))}); this is not a Label Studio "
                        "JSON export")
    answered = [a for a in annotations if isinstance(a, dict) and not a.get("was_cancelled") and not a.get("skipped")]
    if not answered:
        return None
    choices = [_result_labels(where, a.get("result") or [], from_name) for a in answered]
    given = [c for c in choices if c is not None]
    if not given:
        return None
    if len(set(given)) > 1:
        report.disagreeing.append(task.get("id"))
    latest = max(range(len(answered)), key=lambda i: (_annotated_at(answered[i]), i))
    return choices[latest] if choices[latest] is not None else given[-1]


_NO_TIME = datetime.min.replace(tzinfo=timezone.utc)


def _annotated_at(annotation: dict) -> datetime:
    """When an annotation was last changed, as a time: compared as strings, '...:00Z' came after '...:00.900000Z'
    and '+08:00' was not converted. A time without a zone is UTC (as Label Studio writes); none readable, the
    earliest."""
    for key in ("updated_at", "created_at"):
        value = annotation.get(key)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return _NO_TIME


def answer_labels(where: str, results: list, from_name: str | None = None,
                  separator: str = PATH_SEPARATOR) -> tuple[str, ...] | None:
    """The labels one Label Studio annotation (its "result" list) chose, a taxonomy path joined by `separator`; None
    when it chose none. `where` starts the one-line error for a result that is not a classification's."""
    return _result_labels(where, results, from_name, separator)


def _result_labels(where: str, results: list, from_name: str | None,
                   separator: str = PATH_SEPARATOR) -> tuple[str, ...] | None:
    chosen = [r for r in results if isinstance(r, dict) and r.get("type") in CHOICE_TYPES]
    other = sorted({str(r.get("type")) for r in results if isinstance(r, dict)} - set(CHOICE_TYPES))
    if not chosen and other:
        raise UserError(f"{where}: its results are of type {', '.join(other)}, not choices or taxonomy: paddle_ft "
                        "imports text-classification projects only")
    names = sorted({r.get("from_name") for r in chosen})
    if from_name is not None:
        chosen = [r for r in chosen if r.get("from_name") == from_name]
        if not chosen and names:
            raise UserError(f"{where}: no answer from --from-name {from_name} (its control tags: {', '.join(names)})")
    elif len(names) > 1:
        raise UserError(f"{where} answers several control tags ({', '.join(names)}): choose one with --from-name")
    if not chosen:
        return None
    # a choice given twice (two results of one tag, or one list naming it twice) is one label, not a label set
    return tuple(dict.fromkeys(label for r in chosen for label in _value_labels(where, r.get("type"),
                                                                                  r.get("value") or {}, separator)))


def _value_labels(where: str, kind: str, value: dict, separator: str = PATH_SEPARATOR) -> list[str]:
    items = value.get(kind)
    if not isinstance(items, list):
        raise UserError(f"{where}: a {kind} result without a '{kind}' list in its value")
    if kind == "taxonomy":
        split = next((str(name) for path in items for name in path if separator in str(name)), None)
        if split is not None:  # 'TCP/IP' would become two levels of the tree
            raise UserError(f"{where}: the taxonomy node {split!r} holds {separator!r}, which separates the levels "
                            "of a label path; rename it in the project's taxonomy (as "
                            f"{split.replace(separator, '-')})")
        return [separator.join(str(name) for name in path) for path in items]
    return [str(item) for item in items]


def _is_answer(value) -> bool:
    """A control tag's answer in a flat export: {"choices": [...]}, or a list of {"taxonomy": [...]}."""
    if isinstance(value, list):
        return bool(value) and all(_is_answer(item) for item in value)
    return isinstance(value, dict) and any(kind in value for kind in CHOICE_TYPES)


def _min_labels(where: str, row: dict, from_name: str | None) -> tuple[tuple[str, ...] | None, str | None]:
    """A flat export row's labels and the key holding them: the control tag's name, its value a choice (a string),
    {"choices": [...]}, or a list of {"taxonomy": [[...]]}."""
    if from_name is None:
        answers = [key for key, value in row.items() if _is_answer(value)]
        if len(answers) > 1:
            raise UserError(f"{where} answers several control tags ({', '.join(answers)}): choose one with --from-name")
        strings = [key for key, value in row.items() if isinstance(value, str)
                   and key not in {TEXT_KEY, PAIR_KEY, *LABEL_STUDIO_MIN_KEYS}]
        if answers:
            from_name = answers[0]
        elif FROM_NAME in row or len(strings) == 1:  # a single choice is a plain string: our tasks' tag, or the one
            from_name = FROM_NAME if FROM_NAME in row else strings[0]
        else:
            raise UserError(f"{where}: which key holds the label ({', '.join(strings) or 'none'})? name its control "
                            "tag with --from-name")
    value = row.get(from_name)
    if value is None or value == "":
        return None, from_name
    if isinstance(value, str):
        return (value,), from_name
    if not _is_answer(value):
        raise UserError(f"{where}: '{from_name}' holds {json.dumps(value, ensure_ascii=False)[:60]}, not a choice")
    labels = [label for answer in (value if isinstance(value, list) else [value])
              for label in _value_labels(where, next(k for k in CHOICE_TYPES if k in answer), answer)]
    return tuple(dict.fromkeys(labels)) or None, from_name


def _texts(where: str, data: dict) -> tuple[str, str | None]:
    text = data.get(TEXT_KEY)
    if not isinstance(text, str):
        strings = [key for key, value in data.items() if isinstance(value, str)]
        raise UserError(f"{where} has no text under '{TEXT_KEY}' (its data's keys: {', '.join(sorted(data))}); "
                        f"paddle_ft reads the task's data.text{' (found: ' + ', '.join(strings) + ')' if strings else ''}")
    pair = data.get(PAIR_KEY)
    return text, pair if isinstance(pair, str) else None
