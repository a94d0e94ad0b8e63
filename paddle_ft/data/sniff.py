"""What a labelled file holds, read from the file itself: its format, which column is the text (and the second text
of a pair), which is the label, whether a row has one label or a set of them, and how long its texts are. `init`
writes a config from it; every choice comes with the reason it prints."""
from __future__ import annotations

import math
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
MULTI_LABEL_SHARE = 0.02  # a delimiter in this share of the label cells, splitting them into known names: label sets
LENGTH_QUANTILE = 0.95  # max_length keeps this share of the training texts whole
LENGTH_STEP, MIN_LENGTH, MAX_LENGTH = 16, 32, 512


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
    reasons: list[str] = field(default_factory=list)


def sniff_layout(path: Path) -> Layout:
    fmt = format_of(path)
    records = read_records(path, fmt)
    columns = list(dict.fromkeys(name for _, record in records for name in record))
    text = _by_name(columns, TEXT_NAMES) or _longest(records, columns)
    label = _by_name([c for c in columns if c != text], LABEL_NAMES) or _fewest_values(records, columns, text)
    if text is None or label is None or text == label:
        raise DataError(str(path), None, f"cannot tell the text column from the label column (columns: "
                                         f"{', '.join(columns)}); name them text and label")
    layout = Layout(fmt, text, label, reasons=[
        f"format {fmt}: the file's extension",
        f"text column '{text}': " + ("its name" if text in TEXT_NAMES else "the longest values"),
        f"label column '{label}': " + ("its name" if label in LABEL_NAMES else "the fewest distinct values")])
    pair = _by_name([c for c in columns if c not in (text, label)], PAIR_NAMES)
    if pair is not None:
        layout.text_pair_column = pair
        layout.reasons.append(f"second text column '{pair}': its name (the model classifies text pairs)")
    _decide_task(layout, [record.get(label) for _, record in records])
    return layout


def _decide_task(layout: Layout, cells: list) -> None:
    if any(isinstance(cell, list) for cell in cells):
        layout.multi_label = True
        layout.reasons.append("multi-label: the label cells are lists of names")
        return
    strings = [str(cell).strip() for cell in cells if cell is not None]
    for delimiter in LABEL_DELIMITERS:
        split = [cell for cell in strings if delimiter in cell]
        whole = all(part.strip() for cell in split for part in cell.split(delimiter))  # no "a," or ",b"
        if whole and len(split) >= max(1, MULTI_LABEL_SHARE * len(strings)):
            layout.multi_label, layout.label_delimiter = True, delimiter
            layout.reasons.append(f"multi-label: {len(split)} of {len(strings)} label cells name several labels "
                                  f"separated by '{delimiter}'")
            return
    layout.reasons.append("single-label: one label name per row")


def propose_max_length(lengths: list[int], pair: bool, limit: int = MAX_LENGTH) -> tuple[int, str]:
    """Tokens per text (pair) that keep LENGTH_QUANTILE of them whole ([CLS] and [SEP]s included), a multiple of
    LENGTH_STEP within [MIN_LENGTH, `limit`]; and why."""
    ordered = sorted(lengths)
    kept = ordered[min(len(ordered) - 1, math.ceil(LENGTH_QUANTILE * len(ordered)) - 1)] + (3 if pair else 2)
    length = max(MIN_LENGTH, min(limit, math.ceil(kept / LENGTH_STEP) * LENGTH_STEP))
    whole = sum(n + (3 if pair else 2) <= length for n in ordered) / len(ordered)
    return length, (f"max_length {length}: {whole:.0%} of the training texts fit whole (the longest has "
                    f"{ordered[-1]} tokens; longer ones are cut as data.long_text says)")


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
