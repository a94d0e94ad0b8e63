"""Read TSV / CSV / JSONL files into `Example` rows, checking every row.

A bad row (undecodable bytes, wrong number of fields, missing column, empty text, unknown label,
broken JSON) raises `DataError` with the file and line, or with `on_bad_row="skip"` is dropped and
counted in `ReadReport`. Blank lines carry no row and are ignored.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from paddle_ft.data import text_files
from paddle_ft.errors import DataError
from paddle_ft.io import atomic_file
from paddle_ft.tokenization import NO_TOKEN, readable, without_tokens

FORMATS = ("tsv", "csv", "jsonl")
MAX_SKIPPED_SHARE = 0.05
"""data.on_bad_row=skip drops at most this share of a file's rows; more means the file is wrong, not a few rows."""


@dataclass(frozen=True)
class Columns:
    """Which fields hold the text(s) and the label."""

    text: str = "text"
    text_pair: str | None = None
    label: str | None = "label"
    """None when reading unlabelled input for prediction."""
    label_delimiter: str | None = None
    """Set for multi-label rows: what separates the label names in the label column (a JSONL row may give a
    list instead); None = one label name per row."""
    allow_no_label: bool = False
    """Multi-label rows: an empty label set is allowed (a text with none of the labels)."""
    header: bool = True
    """TSV and CSV: the first row names the columns; without one they are named by position, "1", "2", ..."""

    @classmethod
    def of(cls, settings, multi_label: bool) -> Columns:
        """How to read the files `settings` describe: a config's `data` section, a model's `ModelMeta` (a labelled
        file of the kind its training read) or the layout `init` found, which all name the columns `text_column`,
        `text_pair_column`, `label_column`, `label_delimiter`, `allow_no_label` and `header`."""
        return cls(settings.text_column, settings.text_pair_column, settings.label_column,
                   (settings.label_delimiter or ",") if multi_label else None, settings.allow_no_label, settings.header)


@dataclass(frozen=True)
class Example:
    text: str
    text_pair: str | None
    label: str | tuple[str, ...] | None
    """The label name; a multi-label row's set of names (in the order the row gives them); None unlabelled."""
    line: int
    """1-based line in the source file, for error messages and error reports."""

    @property
    def label_names(self) -> tuple[str, ...]:
        """The row's label names, single- or multi-label."""
        return self.label if isinstance(self.label, tuple) else (self.label,)

    @property
    def label_key(self) -> str:
        """One string per label (set): what stratified folds and the conflict check group rows by."""
        return ",".join(sorted(self.label)) if isinstance(self.label, tuple) else self.label


@dataclass
class ReadReport:
    path: str
    rows: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    """(line, reason) for every skipped row."""

    def summary(self) -> str:
        text = f"{self.path}: {self.rows} rows"
        if self.skipped:
            first = "; ".join(f"line {line}: {why}" for line, why in self.skipped[:3])
            text += f", {len(self.skipped)} bad rows skipped (first: {first})"
        return text


class _BadRow(Exception):
    def __init__(self, line: int, reason: str):
        self.line, self.reason = line, reason


def format_of(path: str | Path, default: str | None = None) -> str:
    """The format named by a file's extension, else `default`."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in FORMATS:
        return suffix
    if default is None:
        raise DataError(str(path), None, f"cannot tell the format from the extension; use one of "
                                         f"{', '.join('.' + f for f in FORMATS)}")
    return default


def read_examples(path: str | Path, fmt: str, columns: Columns, labels: frozenset[str] | None = None,
                  on_bad_row: str = "error", skip_option: str | None = None) -> tuple[list[Example], ReadReport]:
    """All rows of `path`. With `labels`, a row whose label is not in it is a bad row. A bad row is an error naming
    its line, and `skip_option` (the setting or flag of the caller that leaves bad rows out) where it has one."""
    path = text_files.check_readable(path, "check the data path in the config or command")
    report = ReadReport(str(path))
    records = {"tsv": _tsv_records, "csv": _csv_records, "jsonl": _jsonl_records}[fmt]

    def rows():
        for line, record in records(path, columns):
            try:
                yield _to_example(line, record, columns, labels)
            except _BadRow as bad:
                if on_bad_row != "skip":
                    raise DataError(str(path), bad.line, bad.reason + _fix(skip_option)) from None
                report.skipped.append((bad.line, bad.reason))

    examples = _load_with_paddlenlp(rows)
    report.rows = len(examples)
    if not examples:
        raise DataError(str(path), None, "no usable rows in the file")
    _check_skipped_share(path, report.skipped, len(examples), skip_option)
    return examples, report


def _fix(skip_option: str | None) -> str:
    return f" (fix the row, or use {skip_option} to drop bad rows)" if skip_option else " (fix the row or remove it)"


def _check_skipped_share(path: Path, skipped: list[tuple[int, str]], kept: int, skip_option: str | None) -> None:
    """More bad rows than MAX_SKIPPED_SHARE of a file's rows is not a few bad rows but a wrong file: an error at the
    first of them."""
    if len(skipped) > MAX_SKIPPED_SHARE * (kept + len(skipped)):
        line, reason = min(skipped)
        raise DataError(str(path), line, f"{reason}; {len(skipped)} of {kept + len(skipped)} rows are bad, more than "
                        f"{skip_option or 'skipping bad rows'} drops ({MAX_SKIPPED_SHARE:.0%}): is the file in "
                        "another format or delimiter? Fix the file")


def read_records(path: str | Path, fmt: str, header: bool = True, on_bad_row: str = "error",
                 skip_option: str | None = None, allow_empty: bool = False) -> list[tuple[int, dict]]:
    """(line, {column: value}) of every row of `path` as the file has it, before any column is chosen (`init` reads
    its columns from them); a bad row is a `DataError` naming its line (and `skip_option`, where the caller takes
    one), or with `on_bad_row="skip"` left out. A file of no rows is an error unless `allow_empty` (a review file
    of a run that flagged nothing)."""
    path = text_files.check_readable(path)
    reader = {"tsv": _tsv_records, "csv": _csv_records, "jsonl": _jsonl_records}[fmt]
    records = []
    for line, record in reader(path, Columns(None, None, None, header=header)):
        if isinstance(record, _BadRow):
            if on_bad_row == "skip":
                continue
            raise DataError(str(path), record.line, record.reason + _fix(skip_option))
        records.append((line, record))
    if not records and not allow_empty:
        raise DataError(str(path), None, "no rows in the file (a header and at least one row are needed)")
    return records


def read_texts(path: Path, text_column: str = "text", text_pair_column: str | None = None, on_bad_row: str = "error",
               skipped: list | None = None, skip_option: str | None = None, header: bool = True
               ) -> tuple[list[str], list[str] | None, list[int]]:
    """Texts of a .txt file (one per non-blank line) or of the text column of a .tsv/.csv/.jsonl file, the second
    texts of its pair column when one is named, and the line each text came from. A .txt line ends at a line
    feed (after an optional carriage return) only: a form feed or U+2028 inside a line is part of its text. A text
    the model would read as nothing (`tokenizer.readable`) is refused at its line: one rule for every file of texts
    (predict --input, pretraining and distillation corpora, calibration texts). With `on_bad_row="skip"` a bad row is
    left out and its (line, reason) appended to `skipped`, up to MAX_SKIPPED_SHARE of the rows (more: the file is
    wrong, and that is an error)."""
    path = Path(path)
    bad: list[tuple[int, str]] = []
    texts, pairs, lines = _texts_of(path, Columns(text_column, text_pair_column, None, header=header), on_bad_row, bad,
                                    skip_option)
    empty = sorted(set(without_tokens(texts)) | set(without_tokens(pairs or [])))
    if empty and on_bad_row != "skip":
        raise DataError(str(path), lines[empty[0]], f"the text {NO_TOKEN}; fix the line or remove it")
    if empty:
        bad += [(lines[i], f"the text {NO_TOKEN}") for i in empty]
        dropped = set(empty)
        keep = [i for i in range(len(texts)) if i not in dropped]
        texts, lines = [texts[i] for i in keep], [lines[i] for i in keep]
        pairs = [pairs[i] for i in keep] if pairs is not None else None
    if bad:
        _check_skipped_share(path, bad, len(texts), skip_option)
        if skipped is not None:
            skipped += sorted(bad)
    return texts, pairs, lines


def _texts_of(path: Path, columns: Columns, on_bad_row: str, bad: list[tuple[int, str]], skip_option: str | None):
    if path.suffix.lower() in (".tsv", ".csv", ".jsonl"):
        examples, report = read_examples(path, format_of(path), columns, on_bad_row=on_bad_row,
                                         skip_option=skip_option)
        bad += report.skipped
        return ([e.text for e in examples], [e.text_pair for e in examples] if columns.text_pair else None,
                [e.line for e in examples])
    if columns.text_pair:
        raise DataError(str(path), None, "this model classifies text pairs: give a .tsv/.csv/.jsonl file with "
                                         f"text and {columns.text_pair} columns")
    texts, lines = [], []
    for number, text in _decoded_lines(path):
        if isinstance(text, _BadRow):
            if on_bad_row != "skip":
                raise DataError(str(path), number, text.reason)
            bad.append((number, text.reason))
            continue
        texts.append(text.strip())
        lines.append(number)
    if not texts:
        raise DataError(str(path), None, "no texts in the file")
    return texts, None, lines


def write_examples(path: Path, fmt: str, columns: Columns, examples: list[Example]) -> None:
    """`examples` as a file of format `fmt` that `read_examples` reads back into the same rows (labels, label
    sets and text pairs included): how cross-validation hands each fold to a normal training run."""
    def record(e: Example) -> dict:
        label = e.label
        if isinstance(label, tuple):
            label = list(label) if fmt == "jsonl" else columns.label_delimiter.join(label)
        fields = {columns.text: e.text, columns.text_pair: e.text_pair, columns.label: label}
        return {name: value for name, value in fields.items() if name is not None}

    names = [n for n in (columns.text, columns.text_pair, columns.label) if n is not None]
    write_records(path, fmt, names, [record(e) for e in examples])


def one_line(text: str) -> str:
    """A text as one field of a TSV line: its runs of whitespace (a tab or newline of a CSV/JSONL text included) made
    one space."""
    return " ".join(text.split())


def write_records(path: Path, fmt: str, names: list[str], records: list[dict]) -> None:
    """Rows {column: value} as a file of format `fmt` with the columns `names` (a header for TSV and CSV), which
    `read_records` reads back. A TSV field must hold no tab or newline (a TSV that was read holds none)."""
    with atomic_file(path, newline="") as out:
        if fmt == "jsonl":
            out.writelines(json.dumps({n: r[n] for n in names}, ensure_ascii=False) + "\n" for r in records)
        elif fmt == "csv":
            writer = csv.DictWriter(out, fieldnames=names)
            writer.writeheader()
            writer.writerows({n: r[n] for n in names} for r in records)
        else:
            out.write("\t".join(names) + "\n")
            out.writelines("\t".join(str(r[n]) for n in names) + "\n" for r in records)


def _load_with_paddlenlp(rows) -> list[Example]:
    """Materialise rows through PaddleNLP's dataset loader, the ecosystem's reader protocol."""
    from paddlenlp.datasets import load_dataset

    return list(load_dataset(lambda: rows(), lazy=False))


def _decoded_lines(path: Path) -> Iterator[tuple[int, str | _BadRow]]:
    """(line number, text) of each non-blank line by the shared rules (`text_files`); undecodable bytes are a bad
    row."""
    for number, text in text_files.lines(path):
        if isinstance(text, text_files.NotUtf8):
            yield number, _BadRow(number, text.reason)
        elif text.strip():
            yield number, text


def _tsv_records(path: Path, columns: Columns):
    """Tab-separated, one record per line, no quoting (a text cannot hold a tab or a newline)."""
    rows = ((number, text if isinstance(text, _BadRow) else text.split("\t")) for number, text in _decoded_lines(path))
    return _table_records(path, columns, rows, "tab")


def _csv_records(path: Path, columns: Columns):
    return _table_records(path, columns, _csv_rows(path), "comma")


def _csv_rows(path: Path):
    """(first line, fields) of each CSV record, as Python's csv module writes them: quoted fields may hold
    commas, quotes, tabs and newlines. Undecodable bytes stay in the text as surrogate escapes and make
    the row bad later (`_field`); a quote that is never closed is an error at the line that opened it."""
    # Python's csv module refuses a field over 131,072 characters by default ("field larger than field limit"); a
    # long document is a text like any other (data.truncation decides what of it the model reads)
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        while True:
            start = reader.line_num + 1  # the record about to be read starts on this line (a blank line is a record)
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                if "unexpected end of data" in str(exc):  # the rest of the file is inside the quote
                    raise DataError(str(path), start, "a quote opened on this line is never closed; close it, or "
                                                      "double a quote that is part of the text (\"\")") from None
                yield start, _BadRow(start, f"not valid CSV ({exc})")
                continue
            if fields and not (len(fields) == 1 and not fields[0].strip()):  # blank lines carry no row
                yield start, fields


def _table_records(path: Path, columns: Columns, rows, separator: str):
    """Records of a delimited file: the first row is the header (or, without one, the columns are named by position
    and the first row is data), every other row maps it to its fields. A spreadsheet's `sep=X` first line names the
    delimiter: it is skipped when it is this format's, and an error naming the fix when not."""
    header = None
    for number, fields in rows:
        if isinstance(fields, _BadRow):
            if header is None:
                raise DataError(str(path), number, fields.reason)
            yield number, fields
            continue
        if header is None and (declared := _SEP_LINE.fullmatch(SEPARATORS[separator].join(fields))):
            if declared[1] != SEPARATORS[separator]:
                fix = {",": "set data.format: csv (or give it a .csv name)", "\t": "set data.format: tsv (or give "
                       "it a .tsv name)"}.get(declared[1], "save it as CSV with commas or as TSV")
                raise DataError(str(path), number, f"the first line declares {declared[1]!r} as the delimiter (a "
                                f"spreadsheet's sep= line), but the file is read as {separator}-separated; {fix}")
            continue
        if header is None:
            header = [name.strip() for name in fields] if columns.header else \
                [str(position) for position in range(1, len(fields) + 1)]
            _check_header(path, number, header, columns, separator)
            if columns.header:
                continue
        if len(fields) != len(header):
            yield number, _BadRow(number, f"{len(fields)} fields where the header has {len(header)} "
                                          f"(a stray {separator} inside a text?)")
        else:
            yield number, dict(zip(header, fields))


SEPARATORS = {"tab": "\t", "comma": ","}
_SEP_LINE = re.compile(r"sep=(.)[,\t]?")


def _check_header(path: Path, line: int, header: list[str], columns: Columns, separator: str) -> None:
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise DataError(str(path), line, f"the header names the column '{twice[0]}' twice; rename one of them")
    for role, name in (("text_column", columns.text), ("text_pair_column", columns.text_pair),
                       ("label_column", columns.label)):
        if name is not None and name not in header:
            other = {"tab": (",", "csv"), "comma": ("\t", "tsv")}[separator]
            if len(header) == 1 and other[0] in header[0]:  # the file is split by the other delimiter
                raise DataError(str(path), line, f"read as {separator}-separated, the header is one column "
                                f"'{header[0]}': the file looks {other[1].upper()}; set data.format: {other[1]} "
                                f"(or give it a .{other[1]} name)")
            if not columns.header:
                raise DataError(str(path), line, f"no column '{name}': without a header row the columns are named by "
                                f"position, 1 to {len(header)}; set data.{role} to one of them")
            raise DataError(str(path), line, f"the header has no column '{name}' ({separator}-separated columns: "
                            f"{', '.join(header)}); set data.{role} or fix the header")


def _jsonl_records(path: Path, columns: Columns):
    for number, text in _decoded_lines(path):
        if isinstance(text, _BadRow):
            yield number, text
            continue
        try:
            record = text_files.parse_json(text)
        except ValueError as exc:  # not JSON; NaN/Infinity, a key twice, an integer too long, deep nesting
            yield number, _BadRow(number, text_files.json_problem(exc))
            continue
        if not isinstance(record, dict):
            yield number, _BadRow(number, "expected a JSON object per line")
            continue
        yield number, record


def _to_example(line: int, record, columns: Columns, labels: frozenset[str] | None) -> Example:
    if isinstance(record, _BadRow):
        raise record
    text = _field(record, columns.text, line)
    pair = _field(record, columns.text_pair, line) if columns.text_pair else None
    for column, value in ((columns.text, text), (columns.text_pair, pair)):
        if value is not None and not readable(value):  # one rule for every reader of rows: train, eval, cv, ...
            raise _BadRow(line, f"the text in column '{column}' {NO_TOKEN}")
    label = None
    if columns.label is not None and columns.label_delimiter is not None:
        label = _label_set(record, columns, line, labels)
    elif columns.label is not None:
        label = _field(record, columns.label, line).strip()  # a name: surrounding blanks are not part of it
        if labels is not None and label not in labels:
            raise _BadRow(line, f"label '{label}' is not one of {', '.join(sorted(labels))} (if it is a real label, "
                                "add it to data.labels)")
    return Example(text, pair, label, line)


def _label_set(record: dict, columns: Columns, line: int, labels: frozenset[str] | None) -> tuple[str, ...]:
    """The label names of a multi-label row: a JSON list, or one string of names split at the delimiter."""
    name, delimiter = columns.label, columns.label_delimiter
    if name not in record:
        raise _BadRow(line, f"missing column '{name}'")
    value = record[name]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        names = [item.strip() for item in value]
    elif isinstance(value, str):
        names = [item.strip() for item in value.split(delimiter)] if value.strip() else []
    else:
        raise _BadRow(line, f"column '{name}' is not a string of label names or a list of them")
    if any(not item for item in names):
        raise _BadRow(line, f"an empty label name in {value!r}: remove the stray '{delimiter}' (data.label_delimiter)")
    twice = sorted({item for item in names if names.count(item) > 1})
    if twice:
        raise _BadRow(line, f"label '{twice[0]}' is given twice; list each label once")
    if not names and not columns.allow_no_label:
        raise _BadRow(line, "no label; give at least one, or set data.allow_no_label: true if a text may have none")
    unknown = [item for item in names if labels is not None and item not in labels]
    if unknown:
        raise _BadRow(line, f"label '{unknown[0]}' is not one of {', '.join(sorted(labels))}")
    return tuple(names)


def _field(record: dict, name: str, line: int) -> str:
    if name not in record:
        raise _BadRow(line, f"missing column '{name}'")
    value = record[name]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise _BadRow(line, f"column '{name}' is not a string")
    if not value.strip():
        raise _BadRow(line, f"empty text in column '{name}'")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _BadRow(line, f"column '{name}' holds bytes that are not UTF-8 or a lone surrogate "
                            f"({value[exc.start]!r}); re-save the file as UTF-8") from None
    return value  # exactly as written: only an all-blank text is refused
