"""Annotation tools' files: tasks paddle_ft writes for Label Studio and doccano (texts with the model's answer as a
pre-annotation) and the exports those tools write back (texts with the labels people chose).

Formats followed (classification projects only):
- Label Studio, tasks to import: a JSON list of {"data": {"text": ...}, "predictions": [{"model_version", "score",
  "result": [{"from_name", "to_name", "type": "choices", "value": {"choices": [...]}}]}]}; with a labelling config
  (`label_config`) whose Choices tag is named "label" over a Text tag named "text".
- Label Studio, exports read (as Label Studio 1.23.2 writes them: tests/labelling runs the real tool): the JSON
  export (the same tasks with "annotations", each a "result" list as above; "completions" before 1.0), and the flat
  exports JSON-MIN, CSV and TSV: a row per annotation (a task annotated twice is two rows under one "id", a task
  without an answer one row without an "annotation_id"), the data's keys beside the tool's own and each control tag's
  name holding its answer: a choice (a string), {"choices": [...]}, or a list of {"taxonomy": [[...]]}; in CSV and TSV
  a cell holds that answer as JSON text. A taxonomy path is read as its names joined by "/".
- doccano, both ways: JSONL (or a JSON list) of {"text": ..., "label": ["name", ...]}, any other key kept as the
  example's metadata (doccano 1.6 and later; its document-classification projects). doccano 1.8.4 downloads its
  export as a ZIP (tests/labelling runs the real tool): `all.jsonl` from a collaborative project, one file per
  annotator (`NAME.jsonl`) from another; the ZIP is read as it is, the annotators' files merged by example: a text
  the annotators labelled differently is left out and named (the export says nothing of which answer came last).
"""
from __future__ import annotations

import csv
import io
import json
import zipfile
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


LABEL_STUDIO_FIX = "export the Label Studio project as JSON or JSON-MIN"


def read_annotations(path: Path, tool: str, from_name: str | None = None) -> tuple[list[Labelled], ImportReport]:
    """The labelled texts of a `tool` export, in its order."""
    path = text_files.check_readable(path)
    report = ImportReport()
    if tool == "label-studio":
        rows = _label_studio(path, from_name, report)
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


def _label_studio(path: Path, from_name: str | None, report: ImportReport) -> list[Labelled]:
    if path.suffix.lower() in FLAT_SUFFIXES:
        return _flat_rows(path, _table_rows(path), from_name, report)
    items = _json_list(path, "Label Studio", LABEL_STUDIO_FIX)
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


def _doccano(path: Path, report: ImportReport) -> list[Labelled]:
    if zipfile.is_zipfile(path):
        return _doccano_zip(path, report)
    return _doccano_rows(str(path), _doccano_records(path), report)


MAX_ZIP_MEMBER = 2 << 30  # bytes a member of an export may expand to (a larger one is refused, not read)


def _doccano_zip(path: Path, report: ImportReport) -> list[Labelled]:
    """doccano's downloaded ZIP: all.jsonl (a collaborative project), else each annotator's file merged by example."""
    with zipfile.ZipFile(path) as archive:
        names = [info for info in archive.infolist() if info.filename.endswith((".jsonl", ".json"))
                 and not info.is_dir()]
        if not names:
            raise DataError(str(path), None, f"a ZIP without a .jsonl file (it holds {len(archive.namelist())} "
                                             f"files); {DOCCANO_FIX}")
        big = next((info for info in names if info.file_size > MAX_ZIP_MEMBER), None)
        if big is not None:
            raise DataError(str(path), None, f"{big.filename} expands to {big.file_size} bytes; unzip it and give "
                                             "the .jsonl file")
        chosen = [info for info in names if Path(info.filename).name == "all.jsonl"] or names
        members = {info.filename: _member_records(path, info.filename, archive.read(info)) for info in chosen}
    if len(members) == 1:
        name, records = next(iter(members.items()))
        return _doccano_rows(f"{path}:{name}", records, report)
    return _merged_annotators(path, members, report)


def _member_records(path: Path, name: str, data: bytes) -> list[tuple[int, dict]]:
    where = f"{path}:{name}"
    try:
        text = data.removeprefix(text_files.BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(where, None, f"bytes that are not UTF-8 at byte {exc.start}; {DOCCANO_FIX}") from None
    records = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = text_files.parse_json(line)
        except ValueError as exc:
            raise DataError(where, number, f"{text_files.json_problem(exc)}; {DOCCANO_FIX}") from None
        if not isinstance(record, dict):
            raise DataError(where, number, f"not a JSON object; {DOCCANO_FIX}")
        records.append((number, record))
    return records


def _merged_annotators(path: Path, members: dict[str, list[tuple[int, dict]]], report: ImportReport
                       ) -> list[Labelled]:
    """One row per example of several annotators' files: the labels they agree on; an example labelled differently
    left out (`report.unsettled`), one nobody labelled counted as unlabelled."""
    by_example: dict[object, list[Labelled]] = {}
    for name, records in members.items():
        unlabelled = ImportReport()
        for row in _doccano_rows(f"{path}:{name}", records, unlabelled, keep_ids=True):
            by_example.setdefault(row.fields.get("id", row.text), []).append(row)
    rows = []
    for example, answers in by_example.items():
        if len({row.labels for row in answers}) > 1:
            report.unsettled.append(example)
            continue
        row = answers[0]
        rows.append(Labelled(row.text, None, row.labels, {k: v for k, v in row.fields.items() if k != "id"}))
    examples = {record.get("id", record.get("text")) for records in members.values() for _, record in records}
    report.unlabelled += len(examples) - len(by_example)
    return rows


def _doccano_rows(where_file: str, records, report: ImportReport, keep_ids: bool = False) -> list[Labelled]:
    """The labelled rows of doccano records ((line, object) pairs); `keep_ids` keeps each example's id in its
    fields (to merge annotators' files by it)."""
    rows = []
    for line, record in records:
        where = f"{where_file}:{line}"
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
        dropped = ("text", "label", "Comments", "comments") if keep_ids else ("text", "label", "id", "Comments",
                                                                               "comments")
        fields = {k: v for k, v in record.items() if k not in dropped}
        # a collaborative project lists each annotator's label: one name twice is one label, not a label set
        rows.append(Labelled(text, None, tuple(dict.fromkeys(labels)), fields))
    return rows


DOCCANO_FIX = "export the doccano project as JSONL (its ZIP, or the .jsonl inside)"


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
