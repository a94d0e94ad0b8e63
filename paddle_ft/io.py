"""Atomic folder and file writes, their crash recovery, and the guards every command runs on a path it writes.

Rules: nothing is written in place (a folder or a file is built beside its final name and renamed into place),
nothing paddle_ft did not write is ever deleted, and a path that cannot be written is a one-line
`UserError` naming the option it came from, before any work starts.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from paddle_ft.errors import UserError

# `.NAME.tmp-PID[.SUFFIX]` is a folder or file being written; `.NAME.old-PID` is the folder it replaces, between
# the two renames
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)(\.\w+)?$")


@contextlib.contextmanager
def atomic_directory(final: Path):
    """Yield a temporary folder beside `final`; it replaces `final` only if the block finishes.

    Replacing an existing folder takes two renames (final -> .old, tmp -> final). A crash between
    them leaves no `final` but a complete `.old`: `recover_leftovers` puts it back."""
    final = Path(final)
    if final.is_symlink():  # renaming it away would replace the link, and a folder of yours could be behind it
        raise UserError(f"{final} is a symbolic link (to {os.readlink(final)}); paddle_ft replaces a folder by "
                        f"renaming, never through a link: give the folder's own path ({final.resolve()}) or a new one")
    if final.exists() and not final.is_dir():
        raise UserError(f"{final} is a file; give a folder path")
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # a full disk fails a copy naming the file copied from: what could not be written is `final`
            exc.filename, exc.filename2 = str(final), None
        raise
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        tmp.rename(final)


@contextlib.contextmanager
def atomic_file(final: str | Path, newline: str | None = None) -> Iterator[TextIO]:
    """Yield a text file (UTF-8) open beside `final`; it replaces `final` only once the block finishes and the
    bytes are on disk. A full disk or a crash mid-write leaves the previous file whole, never a torn one."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        with open_own_file(tmp, "w", newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(final)  # a failed write or fsync names no file: the error line should
        raise


_MODES = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "r+": os.O_RDWR | os.O_CREAT}


def open_own_file(path: str | Path, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None):
    """Open a file paddle_ft keeps under its own name (a lock, a log, metrics.jsonl, a temporary file) for writing:
    created if missing, and only where that name holds a regular file of one name. A symbolic link (`O_NOFOLLOW`)
    or a hard link planted there could be a file of the user's, which a truncation or a write would destroy; a FIFO
    would hang the command: each is a one-line `UserError` naming the path, and nothing is truncated before the
    check. `mode` is "w", "a" or "r+" (read and write, not truncated), with "b" for bytes (then no `encoding`)."""
    path = Path(path)
    flags = _MODES[mode.replace("b", "")]
    descriptor = _open_own(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC)
    if flags & os.O_TRUNC:
        os.ftruncate(descriptor, 0)
    if "b" in mode:
        return os.fdopen(descriptor, mode)
    return os.fdopen(descriptor, mode, encoding=encoding, newline=newline)


def read_own_text(path: str | Path) -> str:
    """The text of a file paddle_ft wrote under its own name (metrics.jsonl, results.json), read only where that
    name holds a regular file: a FIFO planted there made a resume wait for ever."""
    descriptor = _open_own(Path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(descriptor, "r", encoding="utf-8") as handle:
        return handle.read()


NOT_REGULAR = "is not a regular file (a pipe, a device or a socket)"


def _open_own(path: Path, flags: int) -> int:
    """A descriptor of `path` opened with `flags` (without blocking on a FIFO), once it is known to be a regular file
    with no other name; else a one-line UserError."""
    try:
        descriptor = os.open(path, flags | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{path} is a symbolic link (to {os.readlink(path)}), where paddle_ft keeps a file of its "
                            "own; it never writes through a link, which could point at a file of yours: remove the "
                            "link") from None
        if exc.errno == errno.EISDIR:
            raise UserError(f"{path} is a folder, where paddle_ft keeps a file of its own; move the folder away") \
                from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise UserError(f"{path} {NOT_REGULAR}, where paddle_ft keeps a file of its own; remove it") from None
        raise
    info = os.fstat(descriptor)
    problem = None if stat.S_ISREG(info.st_mode) else NOT_REGULAR
    if problem is None and info.st_nlink > 1:
        problem = f"has {info.st_nlink} names (a hard link: the same file as another, which could be yours)"
    if problem:
        os.close(descriptor)
        raise UserError(f"{path} {problem}, where paddle_ft keeps a file of its own; remove it")
    os.set_blocking(descriptor, True)
    return descriptor


def write_text_atomically(final: str | Path, text: str) -> None:
    with atomic_file(final) as handle:
        handle.write(text)


@contextlib.contextmanager
def atomic_path(final: str | Path) -> Iterator[Path]:
    """A path beside `final` for a library that writes a file by name (a picture, a database); renamed to
    `final` once the block finishes."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}{final.suffix}")
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def user_cache_folder(variable: str, name: str) -> Path | None:
    """Where paddle_ft keeps what it builds or measures once per machine: the folder the environment `variable`
    names, else ~/.cache/paddle_ft/NAME; None where there is no home directory (never a folder named ~ in the
    working directory)."""
    folder = os.environ.get(variable) or os.path.expanduser(f"~/.cache/paddle_ft/{name}")
    return None if folder.startswith("~") else Path(folder)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks (a checkpoint's files, the data a cv or sweep used)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class HashingWriter:
    """A binary file's writer that computes its SHA-256 from the bytes as they are written: a block is hashed on a
    thread of its own while it is written (hashlib and the write both let go of the GIL), where a checkpoint's
    gigabytes used to be read back and hashed after (1.2 s a GB here). `write` returns once both are done, so no
    block is held longer than the caller holds it (save_state's one tensor copy at a time)."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.digest = handle, hashlib.sha256()
        self.hashing = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="paddle_ft-sha256")

    def write(self, data) -> int:
        if memoryview(data).nbytes < 1 << 20:  # pickle's 64 KiB frames: a thread's hand-over would cost more
            self.digest.update(data)
            return self.handle.write(data)
        hashed = self.hashing.submit(self.digest.update, data)
        try:
            return self.handle.write(data)
        finally:
            hashed.result()

    def hexdigest(self) -> str:
        return self.digest.hexdigest()

    def close(self) -> None:
        """Ends the hashing thread (not the file: its owner closes it)."""
        self.hashing.shutdown()


def write_bytes_hashed(path: Path, data: bytes) -> str:
    """Write `data` to `path`; its SHA-256."""
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def being_written(name: str) -> str | None:
    """The name a file or folder called `name` is being written as (`.NAME.tmp-PID[.SUFFIX]` -> NAME), else None."""
    match = _LEFTOVER.match(name)
    return match["name"] if match and match["kind"] == "tmp" else None


def recover_leftovers(folder: Path, log=None) -> None:
    """Undo what a killed process left in `folder`: delete half-written `.NAME.tmp-PID` folders and files, and
    put back a `.NAME.old-PID` whose replacement never arrived. What a live process writes is left alone."""
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        match = _LEFTOVER.match(path.name)
        if not match or _is_alive(int(match["pid"])) or (match["kind"] == "old" and not path.is_dir()):
            continue
        final = folder / match["name"]
        if match["kind"] == "old" and not final.exists():
            path.rename(final)
            message = f"restored {final} (a replacement was interrupted)"
        else:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            message = f"removed {path} (left by an interrupted write)"
        if log is not None:
            log(message)


def _is_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftovers from an earlier attempt in this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


@contextlib.contextmanager
def claimed(final: str | Path, option: str) -> Iterator[Path]:
    """Holds the name of a command's output (a folder or a file) for this process while it is checked and written:
    a second paddle_ft process on the same output, even at the same instant, is refused in one line naming the PID
    that holds it, and checks made inside the block (is it new, or empty?) stay true until the block ends. Two
    add-class (or export) into one --output both exited 0 with one model lost, as each had checked before the
    other wrote. The claim is a marker beside the output, `.NAME.claim`, holding the PID and put in place whole by a
    hard link, which fails where the name exists; one a dead process left is taken over. The output's folder must
    exist (the output checks, `check_output_file` and `check_output_folder`, come first)."""
    final = Path(final)
    marker = final.with_name(f".{final.name}.claim")
    mine = final.with_name(f".{final.name}.claim-{os.getpid()}")
    mine.unlink(missing_ok=True)
    mine.write_text(f"{os.getpid()}\n", encoding="utf-8")
    try:
        for attempt in range(2):
            try:
                os.link(mine, marker)  # made whole, PID inside, or not at all: no reader sees an empty claim
                break
            except FileExistsError:
                holder = _claim_holder(marker)
                if holder is not None and _is_alive(holder):
                    raise UserError(f"{option} {final} is being written by another paddle_ft process (PID {holder}); "
                                    "wait for it to finish, or give another path") from None
                if holder is None or attempt:  # not a claim paddle_ft wrote (no PID in it): never deleted
                    raise UserError(f"{option} {final}: cannot claim it ({marker} is in the way); remove that "
                                    "file") from None
                marker.unlink(missing_ok=True)  # left by a process that is gone
    finally:
        mine.unlink(missing_ok=True)
    try:
        yield final
    finally:
        marker.unlink(missing_ok=True)


def check_new_output_folder(path: str | Path, option: str, fix: str) -> Path:
    """A folder a command creates: `check_output_folder`, and new or empty (else a one-line error ending in `fix`)."""
    target = check_output_folder(path, option)
    if target.exists() and any(target.iterdir()):
        raise UserError(f"{option} {target} already exists and is not empty; {fix}")
    return target


@contextlib.contextmanager
def new_output_folder(path: str | Path, option: str, fix: str) -> Iterator[Path]:
    """`check_new_output_folder`'s folder, `claimed` for the block: it is still new or empty when the block writes it,
    and no other paddle_ft process writes it meanwhile. (A command may check early, before minutes of work, too.)"""
    target = check_output_folder(path, option)  # its parents made, nothing in the way: it can be claimed
    with claimed(target, option):
        yield check_new_output_folder(target, option, fix)


def is_claim(name: str) -> bool:
    """Whether `name` is a claim marker of `claimed` (a command writing the output beside it, or one that died)."""
    return re.fullmatch(r"\..+\.claim(-\d+)?", name) is not None


def _claim_holder(marker: Path) -> int | None:
    try:
        text = marker.read_text(encoding="utf-8", errors="replace").strip() if marker.is_file() else ""
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def check_new_files(paths: dict[str, str | Path | None], overwrite: bool) -> None:
    """Each {option: path} a command writes, refused where something is already there, unless `overwrite`: a second
    run into the same name replaced the first's answers, and a user's file named as the output, without a word."""
    for option, path in paths.items():
        if path is not None and not overwrite and (Path(path).is_symlink() or Path(path).is_file()):
            raise UserError(f"{option} {path} already exists; pass --overwrite to replace it, or give another path")


def check_output_file(path: str | Path, option: str, inputs: dict[str, str | Path] | None = None) -> Path:
    """A file a command will create or overwrite: its folder must exist, it must not be a folder, and it must not be
    one of the command's `inputs` ({option: path}), which it would replace."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder; give a file path")
    for source_option, source in (inputs or {}).items():
        if source is not None and path.exists() and Path(source).exists() and path.samefile(source):
            raise UserError(f"{option} {path} is the {source_option} file: writing it would replace what is read; "
                            "choose another path")
    parent = path.parent
    if not parent.is_dir():
        what = "is a file" if parent.exists() else "does not exist"
        raise UserError(f"{option} {path}: its folder {parent} {what}; create the folder or choose another path")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{option} {path}: the folder {parent} is not writable; choose another path")
    return path


def check_output_folder(path: str | Path, option: str) -> Path:
    """A folder a command will create (with its parents) or fill: no file may stand in its way, and its
    parent must really take a new folder (tried, not judged from permission bits, which root ignores)."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise UserError(f"{option} {path} is a symbolic link to {os.readlink(path)}, which does not exist; create "
                        "that folder, or give another path")
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file; give a folder path")
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UserError(f"{option} {path}: {existing} is a file, so nothing can be created under it; "
                        "choose another path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.parent / f".paddle_ft-probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise UserError(f"{option} {path} cannot be created there ({exc.strerror}); choose another path") from None
    return path


def describe_os_error(exc: OSError, then: str = "run the command again") -> str | None:
    """One line for an environment failure a user can fix (full disk, read-only folder), ending with what
    to do once it is fixed (`then`); None for any other OSError, which is a bug."""
    where = f" writing {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full{where}; free some space, then {then}"
    if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        return f"permission denied{where}; choose a writable folder, then {then}"
    return None
