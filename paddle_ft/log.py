"""What paddle_ft prints: progress lines through tqdm (so that an open progress bar stays intact), and the
output C++ libraries print, kept back where it says nothing to the user."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator

from tqdm import tqdm


def log(message: str) -> None:
    tqdm.write(message)


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
