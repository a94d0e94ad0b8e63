"""A reviewed list of label corrections (`data.corrections`): the file `label-issues` writes (`review.tsv|csv|jsonl`,
in the data's own format) once a person has filled its `decision` column, applied to the rows of train and dev as
training reads them.

Each row names a data row by `file` and `line`, repeats its text (so a file edited since is caught, not silently
mislabelled) and says what to do in `decision`:

    (empty) or keep   the row keeps its label
    accept            the row takes the `suggested` label
    drop              the row is left out of training
    a label name      the row takes that label (a multi-label row: names joined by data.label_delimiter)
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from paddle_ft.data.readers import Columns, Example, format_of, one_line, read_records
from paddle_ft.errors import DataError

FILE, LINE, SUGGESTED, DECISION = "file", "line", "suggested", "decision"
KEEP, ACCEPT, DROP = "keep", "accept", "drop"


@dataclasses.dataclass(frozen=True)
class Correction:
    file: str
    line: int
    text: str
    label: str | tuple[str, ...] | None
    """The new label (set); None: drop the row."""
    review: str
    review_line: int
    """Where the correction itself is (the review file and its line), for the errors that point at it."""


def read_corrections(path: str | Path, columns: Columns, labels: frozenset[str]) -> list[Correction]:
    """The decided rows of the review file `path` (undecided and `keep` rows change nothing and are left out)."""
    corrections, reviewed = [], {}
    for line, record in read_records(path, format_of(path, "tsv"), allow_empty=True):  # header only: nothing flagged
        missing = [name for name in (FILE, LINE, columns.text, DECISION) if name not in record]
        if missing:
            raise DataError(str(path), line, f"has no {', '.join(missing)} column: give the review file label-issues "
                                             "wrote, with its decision column filled")
        try:
            data_line = int(record[LINE])
        except (TypeError, ValueError):
            raise DataError(str(path), line, f"its {LINE} {record[LINE]!r} is not a line number") from None
        row = (Path(str(record[FILE])).resolve(), data_line)
        if row in reviewed:  # read as a table of rows, the last of two decisions would win without a word
            raise DataError(str(path), line, f"reviews {record[FILE]}:{data_line} a second time (first on line "
                                             f"{reviewed[row]}); keep one decision per row")
        reviewed[row] = line
        decision = str(record[DECISION] or "").strip()
        if decision in ("", KEEP):
            continue
        if decision == ACCEPT:
            decision = str(record.get(SUGGESTED) or "").strip()
            if not decision:
                raise DataError(str(path), line, f"says {ACCEPT} but its {SUGGESTED} column is empty")
        label = None if decision == DROP else _label(decision, columns, labels, path, line)
        corrections.append(Correction(str(record[FILE]), data_line, str(record[columns.text]), label, str(path), line))
    return corrections


def _label(decision: str, columns: Columns, labels: frozenset[str], path, line: int) -> str | tuple[str, ...]:
    names = tuple(n.strip() for n in decision.split(columns.label_delimiter)) if columns.label_delimiter else \
        (decision,)
    unknown = [n for n in names if n not in labels]
    if unknown:
        raise DataError(str(path), line, f"decision {decision!r}: {unknown[0]!r} is not a label "
                                         f"({', '.join(sorted(labels))}); write {KEEP}, {ACCEPT}, {DROP} or a label")
    return names if columns.label_delimiter else names[0]


def apply_corrections(examples: dict[str, list[Example]], paths: dict[str, str],
                      corrections: list[Correction]) -> tuple[dict[str, list[Example]], Counter]:
    """`examples` (split -> rows, read from `paths`) with the corrections applied to train and dev, and how many rows
    were relabelled and dropped. A correction must name a row of train or dev whose text is the one reviewed."""
    by_file = {Path(paths[split]).resolve(): split for split in ("train", "dev") if split in paths}
    wanted: dict[str, dict[int, Correction]] = {}
    for correction in corrections:
        split = by_file.get(Path(correction.file).resolve())
        if split is None:
            raise _error(correction, f"names {correction.file}, which is neither data.train nor data.dev of this "
                                     "config: give the review of the files this config trains on")
        wanted.setdefault(split, {})[correction.line] = correction
    counts: Counter = Counter()
    corrected = dict(examples)
    for split, by_line in wanted.items():
        rows = []
        for example in examples[split]:
            correction = by_line.pop(example.line, None)
            if correction is None:
                rows.append(example)
                continue
            if one_line(correction.text) != one_line(example.text):  # a TSV review holds its text on one line
                raise _error(correction, f"{correction.file}:{correction.line} no longer holds the text reviewed "
                                         "(the data changed since label-issues ran): run label-issues again")
            if correction.label is None:
                counts["dropped"] += 1
            else:
                counts["relabelled"] += correction.label != example.label
                rows.append(dataclasses.replace(example, label=correction.label))
        if by_line:
            correction = next(iter(by_line.values()))
            raise _error(correction, f"{correction.file} has no row at line {correction.line} (the data changed since "
                                     "label-issues ran): run label-issues again")
        corrected[split] = rows
    return corrected, counts


def _error(correction: Correction, problem: str) -> DataError:
    return DataError(correction.review, correction.review_line, problem)
