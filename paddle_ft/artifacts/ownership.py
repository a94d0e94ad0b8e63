"""Which command owns an output folder, and which process is writing it: the one check every command that
writes a folder goes through (train, pretrain, distill, cv, sweep, audit, bench, serve --label-studio; report adds
to a run's folder).

    .paddle_ft-owner   {"kind": "cv"}: written when a command first takes a folder; later commands of another
                       kind, and any command on a folder holding files paddle_ft did not write, are refused
    .paddle_ft-lock    an advisory lock (flock) held while a command writes the folder, with the holder's PID;
                       the kernel drops it when that process dies, so a stale lock is simply taken over

A second process on a folder in use is refused in one line naming the PID that holds it, before it writes
anything. Within one process the lock is re-entrant (cv and sweep run `train` on their own sub-folders, and a
sweep may run a trial's folder again).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from paddle_ft.errors import UserError
from paddle_ft.io import being_written, check_output_folder, is_claim, open_own_file, write_text_atomically
from paddle_ft.log import log

OWNER_FILE, LOCK_FILE = ".paddle_ft-owner", ".paddle_ft-lock"
KINDS = ("train", "pretrain", "distill", "cv", "label-issues", "sweep", "audit", "bench", "predict", "label-studio")
DESCRIPTIONS = {"train": "a training run", "pretrain": "a pretraining run", "distill": "a distillation run",
                "cv": "a cross-validation",
                "label-issues": "a label-issues run", "sweep": "a sweep", "audit": "an audit", "bench": "a benchmark",
                "predict": "a batch prediction", "label-studio": "a Label Studio backend's annotations and retrainings"}

OUTPUT_DIR = "config key 'output_dir':"  # how the errors name the folder of train, pretrain, distill, cv and sweep

_held: dict[Path, list] = {}  # resolved folder -> [open lock file, how many blocks of this process hold it]


def owner_of(folder: Path) -> str | None:
    """The kind of command that owns `folder`, or None where no paddle_ft command took it."""
    try:
        kind = json.loads((Path(folder) / OWNER_FILE).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if kind in KINDS else None


@contextlib.contextmanager
def owned_folder(folder: str | Path, kind: str, option: str, busy_fix: str | None = None) -> Iterator[Path]:
    """`folder`, created if need be, owned by `kind` and locked by this process for the block. Refused (one line
    naming `option`, the setting it came from) when another kind owns it, when it holds anything paddle_ft did not
    write, or when another live process holds its lock (then `busy_fix` says what to do, by default to give this
    command another folder; a command adding to a run says to wait)."""
    folder = check_output_folder(folder, option)
    _check_claimable(folder, kind, option)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        _held[key][1] += 1
    else:
        _held[key] = [_lock(folder, option, busy_fix or f"wait for it to finish or stop it, or give this {kind} "
                                                         "another folder"), 1]
    try:
        _check_claimable(folder, kind, option)  # again under the lock: a racing process may have taken it first
        if owner_of(folder) is None:
            write_text_atomically(folder / OWNER_FILE, json.dumps({"kind": kind}) + "\n")
        yield folder
    finally:
        _held[key][1] -= 1
        if _held[key][1] == 0:
            _release(_held.pop(key)[0])


def clear(folder: Path) -> None:
    """Everything in an owned folder but its marker and lock: a command starting its work afresh (--restart).
    Only a folder a paddle_ft command owns is cleared, and only while this process holds it."""
    if owner_of(folder) is None or Path(folder).resolve() not in _held:
        raise ValueError(f"{folder} is not a folder this process owns")
    for path in Path(folder).iterdir():
        if path.name not in (OWNER_FILE, LOCK_FILE):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def require_owner(folder: Path, kinds: tuple[str, ...], what: str) -> None:
    """A command that reads or adds to another command's folder (report on a run): it must be of `kinds`."""
    owner = owner_of(folder)
    if owner not in kinds:
        held = DESCRIPTIONS[owner] if owner else "no folder a paddle_ft command wrote"
        raise UserError(f"{folder} is {held}; give {what}")


def _check_claimable(folder: Path, kind: str, option: str) -> None:
    if not folder.is_dir():
        return
    owner = owner_of(folder)
    if owner is not None and owner != kind:
        raise UserError(f"{option} {folder} holds {DESCRIPTIONS[owner]} (its {OWNER_FILE}); give this {kind} its own "
                        f"folder")
    if owner is None:
        foreign = sorted(p.name for p in folder.iterdir()
                         if not _is_marker(p.name) and not (p.is_dir() and owner_of(p) is not None))
        if foreign:
            raise UserError(f"{option} {folder} holds files paddle_ft did not write ({', '.join(foreign[:3])}); give "
                            "a new or empty folder, so that nothing of yours is overwritten")


def _is_marker(name: str) -> bool:
    """The lock, or the owner marker a racing process is writing this instant (io's atomic write): seen before this
    process takes the lock, that one must be refused as busy, not as foreign."""
    return name == LOCK_FILE or being_written(name) == OWNER_FILE or is_claim(name)


def _lock(folder: Path, option: str, busy_fix: str):
    """The folder's lock file, locked (exclusive, not waiting) and holding our PID."""
    handle = open_own_file(folder / LOCK_FILE, "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise UserError(f"{option} {folder} is being written by another paddle_ft process (PID {holder}); "
                        f"{busy_fix}") from None
    handle.seek(0)
    previous = handle.read().strip()
    if previous and previous != str(os.getpid()):
        log(f"{folder}: took over the lock that process {previous} left (it is no longer running)")
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _release(handle) -> None:
    """An empty lock file is one released in order; a PID left in it means its process died holding it."""
    handle.seek(0)
    handle.truncate()
    handle.close()  # closing the file releases the lock
