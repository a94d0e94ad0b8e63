"""Which paddle_ft modules one `train` run enters, and how often its calls climb back up the layers (a module calling
into a layer above its own: a callback, or an object of a higher layer handed down), from a profile of a real run.

    python tools/train_trace.py            # a tiny scratch run of configs/demo-scratch.yaml on a synthetic corpus

The layers are tools/code_map.py's; docs/architecture.md quotes the figures.
"""
from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.append(str(ROOT / "tests"))  # the tests' tiny corpus and vocabulary; last: no shadowing

import code_map  # noqa: E402


def traced_train(argv: list[str]) -> tuple[set[str], set[tuple[str, str]]]:
    """(the paddle_ft modules whose functions ran, the (caller, callee) module pairs) of `paddle_ft` run with `argv`
    (importing a module is not entering it)."""
    from paddle_ft.cli import main

    entered, calls = set(), set()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith("paddle_ft") or _importing(frame, start):
            return
        entered.add(callee)
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if caller.startswith("paddle_ft") and caller != callee:
            calls.add((caller, callee))

    start = sys._getframe()
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        status = main(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    if status != 0:
        raise SystemExit(f"the traced run failed with exit status {status}")
    return entered, calls


def _importing(frame, start) -> bool:
    """Whether `frame` runs as part of an import (a module's body, a class body or a decorator it calls) that began
    after the frame `start`."""
    while frame is not None and frame is not start:
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def main() -> int:
    from conftest import DEMO, overrides, tiny_run_args, write_splits, write_vocab

    with tempfile.TemporaryDirectory(prefix="paddle_ft-trace-") as scratch:
        folder = Path(scratch)
        data, vocab = write_splits(folder / "data", (96, 32, 32)), write_vocab(folder / "vocab.txt")
        args = tiny_run_args(data, vocab, folder / "out") + ["train.epochs=1"]
        entered, calls = traced_train(["train", "-c", DEMO, *overrides(args)])
    upward = sorted((a, b) for a, b in calls if code_map.layer_of(b) > code_map.layer_of(a))
    print(f"one train run (configs/demo-scratch.yaml, its defaults) entered {len(entered)} paddle_ft modules; "
          f"{len(upward)} caller -> callee module pairs climb back up the layers")
    for caller, callee in upward:
        print(f"  up: {caller} -> {callee}")
    print("entered: " + " ".join(sorted(entered)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
