"""doccano's exports of a document-classification project (1.6 and later), read as doccano 1.8.4 writes them
(tests/labelling runs the real tool; tests/data/doccano_1.8.4 holds files it wrote): JSONL (or a JSON list) of
{"text": ..., "label": ["name", ...]}, any other key kept as the example's metadata; the ZIP doccano downloads, read as
it is: `all.jsonl` from a collaborative project, one file per annotator (`NAME.jsonl`) from another, the annotators'
files merged by example (a text they labelled differently is left out and named: the export says nothing of which
answer came last)."""
from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

from paddle_ft.data import text_files
from paddle_ft.data.annotation import ImportReport, Labelled, json_list
from paddle_ft.errors import DataError, UserError


def read_doccano(path: Path, report: ImportReport) -> list[Labelled]:
    """The labelled texts of a doccano export, in its order."""
    if zipfile.is_zipfile(path):
        return _doccano_zip(path, report)
    return _doccano_rows(str(path), _doccano_records(path), report)


MAX_ZIP_MEMBER = 2 << 30  # bytes a member of an export may expand to (a larger one is refused, not read)


def _doccano_zip(path: Path, report: ImportReport) -> list[Labelled]:
    """doccano's downloaded ZIP: all.jsonl (a collaborative project), else each annotator's file merged by example."""
    try:
        members = _zip_members(path)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise DataError(str(path), None, f"a damaged ZIP ({exc}); download the export again") from None
    if len(members) == 1:
        name, records = next(iter(members.items()))
        return _doccano_rows(f"{path}:{name}", records, report)
    return _merged_annotators(path, members, report)


def _zip_members(path: Path) -> dict[str, list[tuple[int, dict]]]:
    """The records of the ZIP's all.jsonl, else of each annotator's file, by the member's name."""
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
        chosen = [info for info in names if Path(info.filename).stem == "all"] or names
        return {info.filename: _member_records(path, info.filename, archive.read(info)) for info in chosen}


def _member_records(path: Path, name: str, data: bytes) -> list[tuple[int, dict]]:
    where = f"{path}:{name}"
    try:
        text = data.removeprefix(text_files.BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(where, None, f"bytes that are not UTF-8 at byte {exc.start}; {DOCCANO_FIX}") from None
    if name.endswith(".json"):  # doccano's JSON export: one list
        try:
            items = text_files.parse_json(text)
        except ValueError as exc:
            raise DataError(where, getattr(exc, "lineno", None), f"{text_files.json_problem(exc)}; {DOCCANO_FIX}") \
                from None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise DataError(where, None, f"not a list of objects; {DOCCANO_FIX}")
        return list(enumerate(items, start=1))
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
        yield from enumerate(json_list(path, "doccano", DOCCANO_FIX), start=1)
        return
    for line, record in text_files.json_lines(path, DOCCANO_FIX):
        if not isinstance(record, dict):
            raise DataError(str(path), line, f"not a JSON object; {DOCCANO_FIX}")
        yield line, record
