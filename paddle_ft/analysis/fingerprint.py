"""What a resumable multi-run command (cv, sweep) made its results from, so a rerun into the same folder reuses
finished work only when it was made the same way: the resolved config (less where it is written), the checksums of
the files it names, and the command's own settings (folds, search space)."""
from __future__ import annotations

import json
from pathlib import Path

from paddle_ft.config import Config, config_to_dict, flat_config
from paddle_ft.errors import UserError
from paddle_ft.io import file_sha256, write_text_atomically

# where a run goes, how it restarts and whether it draws its report change no result
NOT_PART_OF_THE_WORK = ("output_dir", "train.resume", "train.runtime.write_report")


def fingerprint(config: Config, **settings) -> dict:
    """A JSON-ready record of what the command's results depend on."""
    flat = {k: v for k, v in flat_config(config_to_dict(config)).items() if k not in NOT_PART_OF_THE_WORK}
    # every file the config names (the splits, a label file, a vocabulary) by its content, not its name
    data = {key: file_sha256(Path(value)) for key, value in flat.items()
            if isinstance(value, str) and Path(value).is_file()}
    return json.loads(json.dumps({"config": flat, "data_sha256": data, **settings}, ensure_ascii=False))


def read_work(path: Path) -> dict | None:
    """The fingerprint a command kept in its folder (`write_work`); None before its first run there."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_work(path: Path, work: dict) -> None:
    """Keep `work` as what the folder's results are made from; written once the inputs have been read and checked,
    so that a run refused for a bad input is not taken for work made another way."""
    write_text_atomically(path, json.dumps(work, ensure_ascii=False, indent=2))


def differences(before: dict, now: dict) -> list[str]:
    """`key: THEN then, NOW now` for every setting that differs; a file whose content changed is named by its key."""
    changed = []
    for group in sorted(before.keys() | now.keys()):
        old, new = before.get(group), now.get(group)
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(old.keys() | new.keys()):
                if old.get(key) == new.get(key):
                    continue
                if group == "data_sha256":
                    changed.append(f"the file of {key} (its checksum)")
                else:
                    name = key if group == "config" else f"{group} {key}"
                    changed.append(f"{name}: {old.get(key)!r} then, {new.get(key)!r} now")
        elif old != new:
            changed.append(f"{group}: {old!r} then, {new!r} now")
    return changed


def check_same_work(folder: Path, before: dict | None, now: dict, command: str) -> None:
    """Refuse to resume `command` in `folder` when its earlier results were made another way."""
    if before is None:
        return
    changed = differences(before, now)
    if changed:
        shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise UserError(f"{folder} holds a {command} made another way ({shown}): rerun with its settings to resume "
                        "it, pass --restart to start it afresh (its results are deleted), or give another output_dir")
