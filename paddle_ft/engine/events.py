"""Training events: one line per event in the run's `metrics.jsonl` (`artifacts.run` owns its format), the scalars
also in VisualDL."""
from __future__ import annotations

import math

from paddle_ft.artifacts.run import RunFiles, event_line
from paddle_ft.io import open_own_file, write_text_atomically


class EventLog:
    def __init__(self, files: RunFiles, keep_until_step: int | None = None):
        """A new log, or with `keep_until_step` (a resume) the old one cut back to that step, so events
        logged after the checkpoint and before the stop are not there twice."""
        from visualdl import LogWriter

        path = files.metrics_file
        if keep_until_step is not None and path.is_file():
            kept = [event_line(e.kind, e.step, e.values) for e in files.read_events()
                    if e.step <= keep_until_step and e.kind != "results"]
            write_text_atomically(path, "".join(line + "\n" for line in kept))
        self._jsonl = open_own_file(path, "a" if keep_until_step is not None else "w")
        self._vdl = LogWriter(logdir=str(files.path / "vdl"))

    def write(self, event: str, step: int, **values) -> None:
        self._jsonl.write(event_line(event, step, values) + "\n")
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


def _scalars(values: dict, prefix: str = ""):
    for name, value in values.items():
        if isinstance(value, dict):
            yield from _scalars(value, f"{prefix}{name}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield prefix + name, value
