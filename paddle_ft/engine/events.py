"""Training events: one JSON object per line in `metrics.jsonl`, the scalars also in VisualDL."""
from __future__ import annotations

import json
import math
from pathlib import Path

from paddle_ft.io import write_text_atomically


class EventLog:
    def __init__(self, output_dir: Path, keep_until_step: int | None = None):
        """A new log, or with `keep_until_step` (a resume) the old one cut back to that step, so events
        logged after the checkpoint and before the stop are not there twice."""
        from visualdl import LogWriter

        path = output_dir / "metrics.jsonl"
        if keep_until_step is not None and path.is_file():
            kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and _is_before(json.loads(line), keep_until_step)]
            write_text_atomically(path, "".join(line + "\n" for line in kept))
        self._jsonl = path.open("a" if keep_until_step is not None else "w", encoding="utf-8")
        self._vdl = LogWriter(logdir=str(output_dir / "vdl"))

    def write(self, event: str, step: int, **values) -> None:
        record = {"event": event, "step": step, **_json_safe(values)}
        self._jsonl.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
        self._jsonl.flush()
        for name, value in _scalars(values):
            self._vdl.add_scalar(tag=f"{event}/{name}", value=value, step=step)

    def close(self) -> None:
        self._jsonl.close()
        self._vdl.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _json_safe(value):
    """NaN and inf become null: JSON has no such numbers (Python would write `NaN`, which readers reject)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _is_before(event: dict, step: int) -> bool:
    return event.get("step", 0) <= step and event.get("event") != "results"


def _scalars(values: dict, prefix: str = ""):
    for name, value in values.items():
        if isinstance(value, dict):
            yield from _scalars(value, f"{prefix}{name}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield prefix + name, value
