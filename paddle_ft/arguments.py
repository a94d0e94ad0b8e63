"""Argument checks for the command line and the Python API alike: every number is range-checked and finite, and a
mistake is one `error:` line (argparse's default prints the whole usage block first) or one `UserError`."""
from __future__ import annotations

import argparse
import math
import sys

from paddle_ft.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse, except that a bad option prints `error: PROG: PROBLEM` and exits 2, like every other user
    error. Sub-command parsers inherit the class."""

    def error(self, message: str):
        sys.stderr.write(f"error: {self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def positive_int(text: str) -> int:
    return _integer(text, 1, None, "a positive integer")


def non_negative_int(text: str) -> int:
    return _integer(text, 0, None, "an integer >= 0")


def port(text: str) -> int:
    return _integer(text, 0, 65535, "a port from 0 to 65535")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text[:40]!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text[:40]!r}")
    return value


def share(text: str) -> float:
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text[:40]!r}")
    return value


def _integer(text: str, low: int, high: int | None, expected: str) -> int:
    try:
        value = int(text) if len(text) < 20 else None  # longer than any int64: never a sensible setting
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text[:40]!r}")
    return value


def require_int(name: str, value, low: int, high: int | None = None, none_allowed: bool = False) -> int | None:
    """An integer argument of the Python API (Predictor, Classifier, Prediction.top), checked by the CLI's rule:
    a `UserError` naming it, never a silent empty answer or a setting the engine would misread."""
    if value is None and none_allowed:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or value < low or (high is not None and value > high):
        expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise UserError(f"{name}={value!r}: give {expected}" + (" or None" if none_allowed else ""))
    return value
