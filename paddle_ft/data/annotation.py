"""Annotation tools' files: tasks paddle_ft writes for Label Studio and doccano (texts with the model's answer as a
pre-annotation) and the exports those tools write back (texts with the labels people chose).

Formats followed (classification projects only):
- Label Studio, tasks to import: a JSON list of {"data": {"text": ...}, "predictions": [{"model_version", "score",
  "result": [{"from_name", "to_name", "type": "choices", "value": {"choices": [...]}}]}]}; with a labelling config
  (`label_config`) whose Choices tag is named "label" over a Text tag named "text".
- Label Studio, exports read: the JSON export (the same tasks with "annotations", each a "result" list as above;
  "completions" before 1.0) and JSON-MIN (flat rows: the data's keys, and each control tag's name holding a choice,
  {"choices": [...]} or {"taxonomy": [[...]]}). A taxonomy path is read as its names joined by "/".
- doccano, both ways: JSONL (or a JSON list) of {"text": ..., "label": ["name", ...]}, any other key kept as the
  example's metadata (doccano 1.6 and later; its document-classification projects).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
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
# JSON-MIN's own keys beside the task's data and the control tags' answers
LABEL_STUDIO_MIN_KEYS = frozenset({"id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time"})
CHOICE_TYPES = ("choices", "taxonomy")


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


def write_tasks(path: Path, tool: str, tasks: list[Task], label_names: tuple[str, ...], multi_label: bool) -> list[Path]:
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
                "predictions": [{"model_version": MODEL_VERSION, "score": round(t.score, 6), "result": [
                    {"from_name": FROM_NAME, "to_name": TO_NAME, "type": "choices",
                     "value": {"choices": list(t.labels)}}]}]} for t in tasks]
    config = label_config_path(path)
    with claimed(path, "--output-file"):  # the pair is written by one process at a time
        check_tasks_output(path, tool)
        with atomic_file(path) as out:
            json.dump(records, out, ensure_ascii=False, indent=1)
        with atomic_file(config) as out:
            out.write(label_config(label_names, multi_label, any(t.text_pair is not None for t in tasks)))
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


def label_config(label_names: tuple[str, ...], multi_label: bool, text_pair: bool) -> str:
    """Label Studio's labelling config for these tasks: paste it in the project's Settings > Labeling Interface."""
    choices = "\n".join(f"    <Choice value={quoteattr(name)}/>" for name in label_names)
    pair = f'\n  <Text name="{PAIR_KEY}" value="${PAIR_KEY}"/>' if text_pair else ""
    return (f'{_LABEL_CONFIG_START}{pair}\n'
            f'  <Choices name="{FROM_NAME}" toName="{TO_NAME}" choice="{"multiple" if multi_label else "single"}" '
            f'showInline="true">\n{choices}\n  </Choices>\n</View>\n')


LABEL_STUDIO_FIX = "export the Label Studio project as JSON or JSON-MIN"


def read_annotations(path: Path, tool: str, from_name: str | None = None) -> tuple[list[Labelled], ImportReport]:
    """The labelled texts of a `tool` export, in its order."""
    path = text_files.check_readable(path)
    report = ImportReport()
    if tool == "label-studio":
        rows = _label_studio(path, _json_list(path, "Label Studio", LABEL_STUDIO_FIX), from_name, report)
    else:
        rows = _doccano(path, report)
    if not rows:
        raise DataError(str(path), None, f"no labelled task ({report.unlabelled} without an answer): label some in "
                                         f"{tool} and export again")
    return rows, report


def _json_list(path: Path, tool: str, fix: str) -> list:
    data = text_files.read_json(path, fix)
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise DataError(str(path), None, f"a {type(data).__name__} where {tool}'s JSON export is a list of objects; "
                                         f"{fix}")
    return data


def _label_studio(path: Path, items: list[dict], from_name: str | None, report: ImportReport) -> list[Labelled]:
    full = any("data" in item for item in items)
    rows = []
    for number, item in enumerate(items, start=1):
        where = f"{path}: task {item.get('id', number)}"
        data = item.get("data") if full else item
        if not isinstance(data, dict):
            raise UserError(f"{where}: 'data' is not an object; this is not a Label Studio JSON export")
        if full:
            labels, answer_key = _task_labels(where, item, from_name, report), None
        else:
            labels, answer_key = _min_labels(where, item, from_name)
        if labels is None:
            report.unlabelled += 1
            continue
        text, pair = _texts(where, data)
        # JSON-MIN: the row holds the task's data beside the tool's own keys and the answer
        kept = {TEXT_KEY, PAIR_KEY} if full else {TEXT_KEY, PAIR_KEY, answer_key, *LABEL_STUDIO_MIN_KEYS}
        rows.append(Labelled(text, pair, labels, {k: v for k, v in data.items() if k not in kept}))
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


def _result_labels(where: str, results: list, from_name: str | None) -> tuple[str, ...] | None:
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
                                                                                  r.get("value") or {})))


def _value_labels(where: str, kind: str, value: dict) -> list[str]:
    items = value.get(kind)
    if not isinstance(items, list):
        raise UserError(f"{where}: a {kind} result without a '{kind}' list in its value")
    if kind == "taxonomy":
        split = next((str(name) for path in items for name in path if PATH_SEPARATOR in str(name)), None)
        if split is not None:  # 'TCP/IP' would become two levels of the tree
            raise UserError(f"{where}: the taxonomy node {split!r} holds {PATH_SEPARATOR!r}, which separates the levels "
                            f"of a label path; rename it in the project's taxonomy (as {split.replace(PATH_SEPARATOR, '-')})")
        return [PATH_SEPARATOR.join(str(name) for name in path) for path in items]
    return [str(item) for item in items]


def _is_answer(value) -> bool:
    return isinstance(value, dict) and any(kind in value for kind in CHOICE_TYPES)


def _min_labels(where: str, row: dict, from_name: str | None) -> tuple[tuple[str, ...] | None, str | None]:
    """A JSON-MIN row's labels and the key holding them: the control tag's name, its value a choice (a string), or
    {"choices": [...]} / {"taxonomy": [[...]]}."""
    if from_name is None:
        answers = [key for key, value in row.items() if _is_answer(value)]
        if len(answers) > 1:
            raise UserError(f"{where} answers several control tags ({', '.join(answers)}): choose one with --from-name")
        strings = [key for key, value in row.items() if isinstance(value, str)
                   and key not in {TEXT_KEY, PAIR_KEY, *LABEL_STUDIO_MIN_KEYS}]
        if answers:
            from_name = answers[0]
        elif FROM_NAME in row or len(strings) == 1:  # a single choice is a plain string: our tasks' tag, or the only one
            from_name = FROM_NAME if FROM_NAME in row else strings[0]
        else:
            raise UserError(f"{where}: which key holds the label ({', '.join(strings) or 'none'})? name its control "
                            "tag with --from-name")
    value = row.get(from_name)
    if value is None or value == "":
        return None, from_name
    if isinstance(value, str):
        return (value,), from_name
    kind = next((k for k in CHOICE_TYPES if k in value), None) if isinstance(value, dict) else None
    if kind is None:
        raise UserError(f"{where}: '{from_name}' holds {json.dumps(value, ensure_ascii=False)[:60]}, not a choice")
    return tuple(dict.fromkeys(_value_labels(where, kind, value))) or None, from_name


def _texts(where: str, data: dict) -> tuple[str, str | None]:
    text = data.get(TEXT_KEY)
    if not isinstance(text, str):
        strings = [key for key, value in data.items() if isinstance(value, str)]
        raise UserError(f"{where} has no text under '{TEXT_KEY}' (its data's keys: {', '.join(sorted(data))}); "
                        f"paddle_ft reads the task's data.text{' (found: ' + ', '.join(strings) + ')' if strings else ''}")
    pair = data.get(PAIR_KEY)
    return text, pair if isinstance(pair, str) else None


def _doccano(path: Path, report: ImportReport) -> list[Labelled]:
    rows = []
    for line, record in _doccano_records(path):
        where = f"{path}:{line}"
        if "text" not in record:
            raise UserError(f"{where}: no 'text' key (keys: {', '.join(sorted(record))}); paddle_ft reads doccano 1.6+ "
                            "document-classification exports ({\"text\": ..., \"label\": [...]})")
        if "label" not in record:
            kind = "an intent-detection" if "cats" in record else \
                "an older doccano's (label ids under 'annotations')" if "annotations" in record else "no"
            raise UserError(f"{where}: no 'label' key ({kind} export; keys: {', '.join(sorted(record))}); export a "
                            "document-classification project from doccano 1.6 or later")
        labels = record["label"]
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise UserError(f"{where}: 'label' is {json.dumps(labels, ensure_ascii=False)[:60]}, not a list of "
                            "label names (a sequence-labelling export?); export a document-classification project")
        if not labels:
            report.unlabelled += 1
            continue
        text = record["text"]
        if not isinstance(text, str):
            raise UserError(f"{where}: 'text' is not a string")
        fields = {k: v for k, v in record.items() if k not in ("text", "label", "id", "Comments", "comments")}
        # a collaborative project lists each annotator's label: one name twice is one label, not a label set
        rows.append(Labelled(text, None, tuple(dict.fromkeys(labels)), fields))
    return rows


DOCCANO_FIX = "export the doccano project as JSONL"


def _doccano_records(path: Path):
    """(line, object) of a JSONL export, or of a JSON list (line: its position)."""
    first = next((text for _, text in text_files.text_lines(path) if text.strip()), "")
    if first.lstrip().startswith("["):
        yield from enumerate(_json_list(path, "doccano", DOCCANO_FIX), start=1)
        return
    for line, record in text_files.json_lines(path, DOCCANO_FIX):
        if not isinstance(record, dict):
            raise DataError(str(path), line, f"not a JSON object; {DOCCANO_FIX}")
        yield line, record
