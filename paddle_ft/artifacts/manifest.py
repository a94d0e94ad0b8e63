"""`manifest.json`: the sha256 of every file a folder holds and what made it (versions, the code's commit), so that
`verify` can say later, in one line per difference, whether a saved model or an export is still what was written.
`best/` (`bundle`) and the export (`export`) write one; `verify` reads it."""
from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

from paddle_ft.errors import UserError
from paddle_ft.io import file_sha256, write_text_atomically

MANIFEST = "manifest.json"
TRAINING_KEYS = ("seed", "config", "data", "metrics", "reference", "pretrained", "class_changes")
"""What a trained model's manifest records of its making (reference: the training side of drift,
`paddle_ft.inference.drift`); an export (and its int8 copy) carries them over."""


def versions() -> dict:
    """What the folder was made with: Python, Paddle and its build, PaddleNLP, paddle_ft, and the commit of the
    paddle_ft checkout when it runs from one."""
    import paddle
    import paddlenlp

    import paddle_ft

    build = f"CUDA {paddle.version.cuda()}" if paddle.is_compiled_with_cuda() else "CPU"
    return {"python": platform.python_version(), "paddle": paddle.__version__, "paddle_build": build,
            "paddle_commit": paddle.version.commit, "paddlenlp": paddlenlp.__version__,
            "paddle_ft": paddle_ft.__version__, "paddle_ft_commit": _checkout_commit()}


def _checkout_commit() -> str | None:
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / ".git").exists():
        return None
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    if not head:
        return None
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=checkout,
                             capture_output=True, text=True).stdout.strip()
    return f"{head} with uncommitted changes" if changed else head  # the commit alone would not make it again


def write_manifest(folder: Path, provenance: dict) -> dict:
    """`folder`'s manifest: every file's sha256 (the manifest aside), and `provenance`."""
    files = {path.name: file_sha256(path) for path in sorted(folder.iterdir()) if path.is_file()
             and path.name != MANIFEST}
    manifest = {"files": files, **provenance}
    write_text_atomically(folder / MANIFEST, json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    return manifest


def data_file(path: str | Path, rows: int) -> dict:
    """A data file as a manifest records it: the path as the config gave it, its sha256, the rows used from it."""
    return {"path": str(path), "sha256": file_sha256(Path(path)), "rows": rows}


def training_provenance(folder: Path) -> dict:
    """What `folder`'s manifest records of the model's making (`TRAINING_KEYS`); nothing for a folder without one
    (a model saved by other means)."""
    if not (folder / MANIFEST).is_file():
        return {}
    manifest = read_manifest(folder)
    return {key: manifest[key] for key in TRAINING_KEYS if key in manifest}


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise UserError(f"{folder} has no {MANIFEST}: it was not written by this paddle_ft, or the file was removed; "
                        "export (or train) it again to have one")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest.get("files"), dict):
            raise ValueError
    except (ValueError, AttributeError, OSError):
        raise UserError(f"{path} is damaged (not a manifest paddle_ft writes)") from None
    return manifest


def differences(folder: Path, manifest: dict) -> list[str]:
    """One line per file that is missing, changed, or not in the manifest."""
    lines = []
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            lines.append(f"{path} is missing")
        elif file_sha256(path) != digest:
            lines.append(f"{path} has changed since it was written (sha256 differs from {MANIFEST})")
    extra = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST
                   and p.name not in manifest["files"])
    lines += [f"{folder / name} is not in {MANIFEST}: it was added afterwards" for name in extra]
    return lines
