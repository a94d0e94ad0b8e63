"""A training run's folder (`output_dir`): its layout, and the one reader and writer of the files a run leaves.

    config.yaml       the run's full config (a resume starts from it)
    label_map.json    the run's labels (`data.labels.LabelMap`)
    metrics.jsonl     one `Event` per line (plan, train, eval, results); vdl/ the same for VisualDL
    checkpoints/      step-N folders (`engine.checkpoint`), for an exact resume
    best/             the best model so far: a classifier (`bundle`) or a pretrained encoder (`backbone`)
    results.json      `Results`: the best model's metrics, written last: the run is finished

`engine.run_folder.RunFolder` runs the training side of a run through `RunFiles`; cv, sweep, report and the bench
read what a run left through it too.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.artifacts.meta import MODEL_META
from paddle_ft.errors import UserError
from paddle_ft.io import read_own_text, write_text_atomically

CONFIG_FILE, METRICS_FILE, RESULTS_FILE = "config.yaml", "metrics.jsonl", "results.json"
BEST_DIR, CHECKPOINTS_DIR = "best", "checkpoints"
# files that mark a folder as a run (or a saved model): an export never goes into (or replaces) one
RUN_FILES = (METRICS_FILE, RESULTS_FILE, CONFIG_FILE, CHECKPOINTS_DIR, BEST_DIR, MODEL_META)


@dataclass(frozen=True)
class Results:
    """`results.json`: how the best model scored."""

    best_step: int
    metric: str
    """The dev metric that picked the best model (train.evaluation.metric)."""
    skipped_steps: int
    """Optimizer steps skipped for a non-finite loss."""
    dev: dict | None = None
    """The dev report (every metric, per class, and what dev decided: thresholds, temperature); None without dev."""
    test: dict | None = None

    def as_dict(self) -> dict:
        splits = {name: report for name, report in (("dev", self.dev), ("test", self.test)) if report is not None}
        return {"best_step": self.best_step, "metric": self.metric, "skipped_steps": self.skipped_steps, **splits}

    def score(self, split: str = "dev") -> float:
        """The picking metric on `split`."""
        return getattr(self, split)[self.metric]


@dataclass(frozen=True)
class Event:
    """One line of `metrics.jsonl`: what happened (`kind`: plan, train, eval, results) at an optimizer step."""

    kind: str
    step: int
    values: dict
    """Its numbers (loss, lr, samples_per_s, a dev report, ...); a non-finite number is None."""


@dataclass(frozen=True)
class RunFiles:
    """The files of the run in `path`."""

    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def results_file(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def best_dir(self) -> Path:
        return self.path / BEST_DIR

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def started(self) -> bool:
        """A run began here (it logged an event): only a resume may reuse the folder."""
        return self.metrics_file.exists()

    @property
    def finished(self) -> bool:
        return self.results_file.is_file()

    def write_results(self, results: Results) -> None:
        write_text_atomically(self.results_file, json.dumps(results.as_dict(), ensure_ascii=False, indent=2))

    def results_so_far(self, metric: str) -> Results | None:
        """A stopped run's best dev evaluation so far, as `Results` (the one best/ holds: the first to reach the
        highest `metric`, as training keeps it), or None before its first evaluation."""
        evaluations = [e for e in self.read_events("eval") if isinstance(e.values.get(metric), (int, float))]
        if not evaluations:
            return None
        best = max(evaluations, key=lambda e: e.values[metric])  # max keeps the first of equals
        return Results(best.step, metric, 0, best.values)

    def read_results(self) -> Results:
        path = self.results_file
        if not path.is_file():
            raise UserError(f"{self.path} is not a finished training run (no {RESULTS_FILE}); give the output_dir "
                            "of a run that finished, or resume it with -o train.resume=auto")
        try:
            data = json.loads(read_own_text(path))
            return Results(int(data["best_step"]), str(data["metric"]), int(data["skipped_steps"]),
                           data.get("dev"), data.get("test"))
        except (OSError, ValueError, KeyError, TypeError):
            raise UserError(f"{path} is damaged (not the results a run writes); train the run again") from None

    def read_events(self, kind: str | None = None) -> list[Event]:
        """The run's events in order (only those of `kind` when given)."""
        events = []
        try:
            lines = read_own_text(self.metrics_file).split("\n")  # a label may hold U+2028, which splitlines breaks at
        except OSError as exc:
            raise UserError(f"{self.metrics_file} cannot be read ({exc.strerror}); give the output_dir of a training "
                            "run") from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                event = Event(record.pop("event"), int(record.pop("step")), record)
            except (ValueError, KeyError, TypeError, AttributeError):
                raise UserError(f"{self.metrics_file}:{number} is damaged (not an event a run writes); train the "
                                "run again") from None
            if kind is None or event.kind == kind:
                events.append(event)
        return events


def event_line(kind: str, step: int, values: dict) -> str:
    """One `metrics.jsonl` line; NaN and inf become null (JSON has no such numbers; Python would write `NaN`,
    which readers reject)."""
    return json.dumps({"event": kind, "step": step, **_json_safe(values)}, ensure_ascii=False, allow_nan=False)


def _json_safe(value):
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
