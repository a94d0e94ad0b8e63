"""What paddle_ft prints: progress lines through tqdm (so that an open progress bar stays intact), and the
output C++ libraries print, kept back where it says nothing to the user."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from tqdm import tqdm


def log(message: str, file=None) -> None:
    """A line for the person running the command: standard output (`file`: elsewhere, as standard error where standard
    output carries the command's answer)."""
    tqdm.write(message, file=file)


def elapsed(seconds: float) -> str:
    """A duration as people read it: 8.2 s, 3 min 05 s, 1 h 02 min."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class Clock:
    """Time since a loop (re)started, and what the items left would take at the pace so far: the elapsed time and
    ETA of progress lines, which without a terminal have no bar to show them."""

    def __init__(self, done: int = 0):
        self.started, self.first = time.perf_counter(), done

    def describe(self, done: int, total: int) -> str:
        seconds = time.perf_counter() - self.started
        pace = seconds / (done - self.first) if done > self.first else 0.0
        return f"elapsed {elapsed(seconds)}, ETA {elapsed(pace * (total - done))}"


@contextlib.contextmanager
def native_output_captured(write_back: Callable[[str], str] | None = None) -> Iterator[Callable[[], str]]:
    """File descriptors 1 and 2 (what C++ code prints to, and Python's own streams) redirected for the block;
    yields a function that returns what was written, once the block is over. With `write_back`, what it keeps
    of that text goes to stderr as the block ends, also when an exception ends it (the context of the error)."""
    written: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as file:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(file.fileno(), 1)
            os.dup2(file.fileno(), 2)
            yield lambda: "".join(written)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            file.seek(0)
            written.append(file.read().decode("utf-8", errors="replace"))
            if write_back is not None:
                sys.stderr.write(write_back(written[0]))


LONG_INPUT = 2048  # items: a shorter input is done within seconds, and shows no progress


class Progress:
    """Progress over `total` items: a bar on a terminal; without one (a log file, a pipe, CI), a line with the
    elapsed time and ETA at every `every` share of the work, and one at the end."""

    def __init__(self, total: int, what: str, every: float = 0.1, file=None):
        self.total, self.what, self.done, self.every, self.file = total, what, 0, every, file
        self.bar = tqdm(total=total, desc=what, unit="text", dynamic_ncols=True, disable=None, file=file)
        self.clock, self.next_line = Clock(), every * total

    def update(self, count: int) -> None:
        self.done += count
        self.bar.update(count)
        if self.bar.disable and (self.done >= self.next_line or self.done == self.total):
            log(f"{self.what}: {self.done}/{self.total}, {self.clock.describe(self.done, self.total)}", self.file)
            self.next_line = self.done + self.every * self.total

    def close(self) -> None:
        self.bar.close()
