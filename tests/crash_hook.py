"""Kill this process with SIGKILL at its N-th filesystem write, as `kill -9` or a power cut would.

Used by test_crash_resume.py: `python tests/crash_hook.py N COUNT_FILE -- <paddle_ft command line>` runs the
command with every write counted (paddle.save, Path.write_text/write_bytes, renames, rmtree); at write N
(if N > 0) a file is left half-written, or a rename or delete is skipped, and the process dies at once.
Each write appends "N what path" to COUNT_FILE, so a test can pick kill points among a run's writes and
say where it killed.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path


def install(kill_at: int, count_file: Path) -> None:
    import paddle

    state = {"writes": 0}

    def record(what: str, path) -> bool:
        """Count one write; True when this is the one to die at."""
        state["writes"] += 1
        with open(count_file, "a") as handle:  # open() is not patched
            handle.write(f"{state['writes']} {what} {path}\n")
        return state["writes"] == kill_at

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def torn(write):
        def wrapper(path, data, *args, **kwargs):
            if record(write.__name__, path):
                half = data[: len(data) // 2]
                write(path, half, *args, **kwargs)  # a torn write: half the bytes made it to disk
                die()
            return write(path, data, *args, **kwargs)
        return wrapper

    real_save = paddle.save

    def save(obj, path, *args, **kwargs):
        real_save(obj, path, *args, **kwargs)
        if record("paddle.save", path):
            with open(path, "r+b") as handle:
                handle.truncate(os.path.getsize(path) // 2)
            die()

    def before(action):
        def wrapper(*args, **kwargs):
            if record(action.__name__, args[0]):
                die()  # killed just before this rename or delete
            return action(*args, **kwargs)
        return wrapper

    paddle.save = save
    Path.write_text = torn(Path.write_text)
    Path.write_bytes = torn(Path.write_bytes)
    Path.rename = before(Path.rename)
    os.replace = before(os.replace)
    shutil.rmtree = before(shutil.rmtree)


if __name__ == "__main__":
    kill_at, count_file, separator, *command = sys.argv[1:]
    assert separator == "--"
    from paddle_ft import runtime

    runtime.configure()
    install(int(kill_at), Path(count_file))
    from paddle_ft.cli import main

    sys.exit(main(command))
