"""What a labelled file holds, read from the file itself: its format, which column is the text (and the second text
of a pair), which is the label, whether a row has one label or a set of them, and how long its texts are. `init`
writes a config from it; every choice comes with the reason it prints."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from paddle_ft.data.readers import format_of, read_records
from paddle_ft.errors import DataError

# names people give these columns, most telling first (PaddleNLP's and Hugging Face's datasets among them)
TEXT_NAMES = ("text", "text_a", "sentence", "sentence1", "content", "review", "query", "question", "question1",
              "title", "文本", "内容", "句子", "评论")
PAIR_NAMES = ("text_pair", "text_b", "sentence2", "question2", "pair", "second_text")
LABEL_NAMES = ("label", "labels", "category", "class", "intent", "tag", "tags", "标签", "类别")
LABEL_DELIMITERS = (",", "|", ";", "，", "、")
MULTI_LABEL_SHARE = 0.02  # a delimiter in this share of the label cells ...
RECOMBINED_SHARE = 0.5  # ... whose parts (this share of them) recombine: label sets, not names holding a delimiter
LONG_HEADER = 20  # a text column's name this long, and no name people give a column, is a text
LENGTH_QUANTILE = 0.95  # max_length keeps this share of the training texts whole
LENGTH_STEP, MIN_LENGTH, MAX_LENGTH = 16, 32, 512


@dataclass(frozen=True)
class Choices:
    """What the user decided on init's command line (None: init reads it from the file)."""

    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    task: str | None = None
    """single_label or multi_label."""
    label_delimiter: str | None = None
    header: bool = True


@dataclass
class Layout:
    """How a labelled file is laid out, and why each part was chosen."""

    format: str
    text_column: str
    label_column: str
    text_pair_column: str | None = None
    label_delimiter: str | None = None
    """Set for multi-label rows given as one string ("财经,股票"); None for one label per row, or a JSON list."""
    multi_label: bool = False
    allow_no_label: bool = False
    """Not sniffed: an empty label set is read as a bad row until the config allows it."""
    header: bool = True
    reasons: list[str] = field(default_factory=list)


def sniff_layout(path: Path, given: Choices = Choices(), on_bad_row: str = "error",
                 skip_option: str | None = None) -> Layout:
    """The layout of the labelled file at `path`; a bad row is an error naming `skip_option`, or left out with
    `on_bad_row="skip"`."""
    fmt = format_of(path)
    records = read_records(path, fmt, given.header, on_bad_row, skip_option)
    columns = list(dict.fromkeys(name for _, record in records for name in record))
    for option, name in (("--text-column", given.text_column), ("--text-pair-column", given.text_pair_column),
                         ("--label-column", given.label_column)):
        if name is not None and name not in columns:
            raise DataError(str(path), None, f"{option} {name}: no such column (columns: {', '.join(columns)})")
    text = given.text_column or _by_name(columns, TEXT_NAMES) or _longest(records, columns)
    label = given.label_column or _by_name([c for c in columns if c != text], LABEL_NAMES) \
        or _fewest_values(records, columns, text)
    if text is None or label is None or text == label:
        raise DataError(str(path), None, f"cannot tell the text column from the label column (columns: "
                                         f"{', '.join(columns)}); name them with --text-column and --label-column")
    if given.header and fmt != "jsonl":
        _check_header_is_not_data(path, records, text, label)
    layout = Layout(fmt, text, label, header=given.header, reasons=[
        f"format {fmt}: the file's extension",
        *([] if given.header else ["no header row (--no-header): the columns are named by position, 1, 2, ..."]),
        f"text column '{text}': " + _why(text, given.text_column, TEXT_NAMES, "the longest values"),
        f"label column '{label}': " + _why(label, given.label_column, LABEL_NAMES, "the fewest distinct values")])
    pair = given.text_pair_column or _by_name([c for c in columns if c not in (text, label)], PAIR_NAMES)
    if pair is not None:
        layout.text_pair_column = pair
        layout.reasons.append(f"second text column '{pair}': " + _why(pair, given.text_pair_column, PAIR_NAMES, "")
                              + " (the model classifies text pairs)")
    _decide_task(layout, [record.get(label) for _, record in records], given)
    return layout


def _why(column: str, given: str | None, names: tuple[str, ...], otherwise: str) -> str:
    return "as given" if column == given else "its name" if column.lower().strip() in names else otherwise


def _check_header_is_not_data(path: Path, records, text: str, label: str) -> None:
    """A file without a header row loses its first row to the column names, silently: refuse a header that reads
    like a row (a label name as the label column's name, a sentence as the text column's)."""
    labels = {str(record.get(label)).strip() for _, record in records}
    if label.strip() in labels:
        why = f"its label cell '{label}' is one of that column's values"
    elif len(text) >= LONG_HEADER and text.lower().strip() not in TEXT_NAMES:
        why = f"its text cell '{text[:30]}...' reads like a text, not a column name"
    else:
        return
    raise DataError(str(path), 1, f"the first row looks like data, not a header ({why}); if the file has no "
                                  "header row, rerun init with --no-header, else rename that column")


def _decide_task(layout: Layout, cells: list, given: Choices) -> None:
    if given.task == "single_label":
        layout.reasons.append("single-label: as given (--task single_label)")
        return
    if any(isinstance(cell, list) for cell in cells):
        layout.multi_label = True
        layout.reasons.append("multi-label: the label cells are lists of names")
        return
    strings = [str(cell).strip() for cell in cells if cell is not None]
    if given.task == "multi_label" or given.label_delimiter is not None:
        delimiter = given.label_delimiter or _most_used_delimiter(strings)
        layout.multi_label, layout.label_delimiter = True, delimiter
        layout.reasons.append(f"multi-label: as given, label names separated by '{delimiter}'")
        return
    for delimiter in LABEL_DELIMITERS:
        split = [cell for cell in strings if delimiter in cell]
        parts = [[part.strip() for part in cell.split(delimiter)] for cell in split]
        if not split or len(split) < MULTI_LABEL_SHARE * len(strings) or not all(all(p) for p in parts):
            continue  # too rare, or "a," / ",b": not a list of names
        if _recombined(strings, split, delimiter):
            layout.multi_label, layout.label_delimiter = True, delimiter
            layout.reasons.append(f"multi-label: {len(split)} of {len(strings)} label cells name several labels "
                                  f"separated by '{delimiter}', in varying combinations")
            return
        layout.reasons.append(f"single-label, although {len(split)} label cells hold '{delimiter}' (e.g. "
                              f"'{split[0]}'): their parts never appear alone or in other combinations, so they "
                              f"read as names of their own; if they are label sets, rerun with --task multi_label "
                              f"--label-delimiter '{delimiter}'")
        return
    layout.reasons.append("single-label: one label name per row")


def _recombined(strings: list[str], split: list[str], delimiter: str) -> bool:
    """Whether the parts of the delimited cells behave like label names: most of them also appear alone, or in more
    than one combination (a label set's members vary; a name that holds a delimiter is always the same string)."""
    alone = set(strings) - set(split)
    combinations = Counter(part for cell in set(split) for part in {p.strip() for p in cell.split(delimiter)})
    reused = [name for name in combinations if name in alone or combinations[name] > 1]
    return len(reused) >= RECOMBINED_SHARE * len(combinations)


def _most_used_delimiter(strings: list[str]) -> str:
    return max(LABEL_DELIMITERS, key=lambda d: (sum(d in cell for cell in strings), d == ","))


def propose_max_length(lengths: list[int], pair: bool, limit: int = MAX_LENGTH,
                       texts: str = "the training texts") -> tuple[int, str]:
    """Tokens per text (pair) that keep LENGTH_QUANTILE of them whole ([CLS] and [SEP]s included), a multiple of
    LENGTH_STEP within [MIN_LENGTH, `limit`]; and why (naming the `texts` measured)."""
    ordered = sorted(lengths)
    kept = ordered[min(len(ordered) - 1, math.ceil(LENGTH_QUANTILE * len(ordered)) - 1)] + (3 if pair else 2)
    length = max(MIN_LENGTH, min(limit, math.ceil(kept / LENGTH_STEP) * LENGTH_STEP))
    whole = sum(n + (3 if pair else 2) <= length for n in ordered) / len(ordered)
    return length, (f"max_length {length}: {whole:.0%} of {texts} fit whole (the longest has "
                    f"{ordered[-1]} tokens; longer ones are cut as data.truncation says)")


def _by_name(columns: list[str], names: tuple[str, ...]) -> str | None:
    lowered = {column.lower().strip(): column for column in columns}
    return next((lowered[name] for name in names if name in lowered), None)


def _longest(records, columns: list[str]) -> str | None:
    def mean_length(column):
        values = [record.get(column) for _, record in records]
        return sum(len(v) for v in values if isinstance(v, str)) / len(values)

    return max(columns, key=mean_length, default=None)


def _fewest_values(records, columns: list[str], text: str) -> str | None:
    candidates = [c for c in columns if c != text]
    return min(candidates, key=lambda c: len({str(record.get(c)) for _, record in records}), default=None)
