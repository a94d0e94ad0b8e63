"""Every file a user hands paddle_ft is read here, by one set of rules (the data readers, annotation exports, label
and description files, a review file read back):

- it must be a regular file: a folder, a FIFO (reading it would wait for ever) or a device is refused by name;
- UTF-8, a byte-order mark at its start dropped (spreadsheets write one); bytes that are not UTF-8 are named by
  FILE:LINE and byte, with the fix;
- lines end at "\\n" only ("\\r\\n" too): U+2028, U+2029, U+0085 and the other characters Python's `splitlines` breaks
  at are text, as they are inside a JSON string;
- no comment syntax inside data: a line starting with `#` is data like any other;
- JSON: NaN and Infinity refused, a key given twice refused (one of the two would silently win).
"""
from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.errors import DataError

BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class NotUtf8:
    """A line whose bytes are not UTF-8 (a reader that may skip bad rows decides what to do with it)."""

    byte: int

    @property
    def reason(self) -> str:
        return f"bytes that are not UTF-8 at byte {self.byte}; re-save the file as UTF-8"


def check_readable(path: str | Path, where_to_look: str = "") -> Path:
    """`path` as a Path, if it is a regular file; else a one-line DataError saying what it is instead (and, for a
    missing file, `where_to_look`)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(str(path), None, "file not found" + (f"; {where_to_look}" if where_to_look else "")) from None
    except OSError as exc:
        raise DataError(str(path), None, f"cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise DataError(str(path), None, "is a folder; give a file")
    if not stat.S_ISREG(mode):
        raise DataError(str(path), None, "is not a regular file (a pipe or a device); give a file")
    return path


def lines(path: str | Path) -> Iterator[tuple[int, str | NotUtf8]]:
    """(line number, text without its line end) of every line, blank ones included; a line of bytes that are not
    UTF-8 is a `NotUtf8` in its place."""
    path = check_readable(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(BOM):
                raw = raw[len(BOM):]
            try:
                yield number, raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
            except UnicodeDecodeError as exc:
                yield number, NotUtf8(exc.start)


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """`lines`, where a line that is not UTF-8 is an error naming it."""
    for number, text in lines(path):
        if isinstance(text, NotUtf8):
            raise DataError(str(path), number, text.reason)
        yield number, text


def read_json(path: str | Path, fix: str):
    """The JSON value of a whole file; anything else one line naming the file, the line and `fix` (what to
    export or write instead)."""
    text = "\n".join(line for _, line in text_lines(path))
    try:
        return parse_json(text)
    except ValueError as exc:
        raise DataError(str(path), getattr(exc, "lineno", None), f"{json_problem(exc)}; {fix}") from None


def json_lines(path: str | Path, fix: str) -> Iterator[tuple[int, object]]:
    """(line number, value) of each non-blank line of a JSON Lines file; a line that is not JSON one line naming it."""
    for number, text in text_lines(path):
        if not text.strip():
            continue
        try:
            yield number, parse_json(text)
        except ValueError as exc:
            raise DataError(str(path), number, f"{json_problem(exc)}; {fix}") from None


class RefusedJson(ValueError):
    """NaN/Infinity, or a key given twice: valid to Python's parser, wrong in a user's data."""


def parse_json(text: str):
    """json.loads, refusing NaN/Infinity and a key given twice in one object (RefusedJson), and numbers too long
    to convert or nesting too deep (ValueError)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError as exc:
        if isinstance(exc, (json.JSONDecodeError, RefusedJson)):
            raise
        raise ValueError("an integer of more digits than can be read") from None


def json_problem(exc: ValueError) -> str:
    """What `parse_json` refused, said one way by every reader: not JSON at all (where), or JSON a user's data must
    not hold (why)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    return f"not usable JSON ({exc})"


def _refuse_constant(name: str):
    raise RefusedJson(f"{name} is not a text or a label")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    value = dict(pairs)
    if len(value) < len(pairs):
        seen = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise RefusedJson(f"the key {twice!r} is given twice in one object")
    return value
