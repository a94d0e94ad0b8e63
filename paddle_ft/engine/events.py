"""Training events: one JSON object per line in `metrics.jsonl`, the scalars also in VisualDL."""
from __future__ import annotations

import json
import math
from pathlib import Path


class EventLog:
    def __init__(self, output_dir: Path):
        from visualdl import LogWriter

        self._jsonl = (output_dir / "metrics.jsonl").open("a", encoding="utf-8")
        self._vdl = LogWriter(logdir=str(output_dir / "vdl"))

    def write(self, event: str, step: int, **values) -> None:
        record = {"event": event, "step": step, **values}
        self._jsonl.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._jsonl.flush()
        for name, value in _scalars(values):
            self._vdl.add_scalar(tag=f"{event}/{name}", value=value, step=step)

    def close(self) -> None:
        self._jsonl.close()
        self._vdl.close()


def _scalars(values: dict, prefix: str = ""):
    for name, value in values.items():
        if isinstance(value, dict):
            yield from _scalars(value, f"{prefix}{name}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield prefix + name, value
