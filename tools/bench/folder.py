"""A bench tool's `--output`, taken as every paddle_ft command takes its folder (artifacts.ownership): created if need
be, marked as a bench's, locked while the bench runs. A folder holding a user's files, another command's folder, or
one a running bench holds is refused in one line before anything in it is written or replaced (the benches replace
their `runs/NAME` folders on a rerun)."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from paddle_ft.artifacts.ownership import owned_folder
from paddle_ft.errors import UserError


@contextlib.contextmanager
def bench_output(path: str | Path) -> Iterator[Path]:
    """The folder at `path`, absolute, owned by this bench for the block; a user's mistake (here or in the block)
    ends the tool with `error: ...` on one line and exit 2, as a paddle_ft command ends on one (paddle_ft.cli)."""
    try:
        with owned_folder(path, "bench", "--output") as folder:
            yield folder.resolve()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
