"""A sweep's search space, read from YAML and checked, and what Optuna needs from it.

    sampler: tpe            # tpe, random or grid
    trials: 8               # for grid: at most the grid's size
    pruner: median          # median (stop a trial whose dev metric is below the median of earlier trials at the
                            # same evaluation) or none
    params:
      train.optimizer.learning_rate: {type: float, low: 1.0e-4, high: 1.0e-3, log: true}
      train.batch_size: {type: categorical, choices: [16, 32]}
      train.epochs: {type: int, low: 2, high: 4}

Every key under `params` is a config key (dotted), set on each trial with -o.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import yaml

from paddle_ft.data import text_files
from paddle_ft.errors import UserError

SAMPLERS, PRUNERS, TYPES = ("tpe", "random", "grid"), ("median", "none"), ("float", "int", "categorical")


@dataclass(frozen=True)
class Param:
    key: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: int = 1
    choices: tuple = ()

    def suggest(self, trial):
        if self.type == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log)
        if self.type == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step)
        return trial.suggest_categorical(self.key, list(self.choices))

    def grid_values(self) -> list:
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int":
            return list(range(int(self.low), int(self.high) + 1, self.step))
        raise UserError(f"params.{self.key}: a grid needs values to enumerate; give type categorical with choices")


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    sampler: str = "tpe"
    trials: int = 8
    pruner: str = "median"

    def grid(self) -> dict:
        return {p.key: p.grid_values() for p in self.params}

    def grid_size(self) -> int:
        return len(list(itertools.product(*self.grid().values())))


def load_space(path: Path) -> Space:
    """The space in `path`; a problem is one line naming the file and the key."""
    if not path.exists():
        raise UserError(f"--space {path} does not exist: give a YAML file (see paddle_ft/analysis/space.py)")
    text = "\n".join(line for _, line in text_files.text_lines(path))  # the shared rules of every user's file
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("params"), dict) or not raw["params"]:
        raise UserError(f"{path}: needs a params mapping of config keys to their ranges")
    unknown = set(raw) - {"params", "sampler", "trials", "pruner"}
    if unknown:
        raise UserError(f"{path}: unknown key {sorted(unknown)[0]} (keys: params, sampler, trials, pruner)")
    space = Space(tuple(_param(path, key, spec) for key, spec in raw["params"].items()),
                  raw.get("sampler", "tpe"), raw.get("trials", 8), raw.get("pruner", "median"))
    for name, value, allowed in (("sampler", space.sampler, SAMPLERS), ("pruner", space.pruner, PRUNERS)):
        if value not in allowed:
            raise UserError(f"{path}: {name} is {value!r}; choose one of {', '.join(allowed)}")
    if not isinstance(space.trials, int) or space.trials < 1:
        raise UserError(f"{path}: trials is {space.trials!r}; give a positive integer")
    if space.sampler == "grid" and space.trials > space.grid_size():
        raise UserError(f"{path}: trials is {space.trials} but the grid has {space.grid_size()} points")
    return space


def _param(path: Path, key: str, spec) -> Param:
    where = f"{path}: params.{key}"
    if not isinstance(spec, dict) or spec.get("type") not in TYPES:
        raise UserError(f"{where}: give {{type: float|int|categorical, ...}}")
    if spec["type"] == "categorical":
        if not isinstance(spec.get("choices"), list) or not spec["choices"]:
            raise UserError(f"{where}: a categorical needs a non-empty choices list")
        return Param(key, "categorical", choices=tuple(spec["choices"]))
    low, high = spec.get("low"), spec.get("high")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or low >= high:
        raise UserError(f"{where}: give numbers low < high")
    if spec.get("log") and low <= 0:
        raise UserError(f"{where}: a log range needs low > 0")
    return Param(key, spec["type"], float(low), float(high), bool(spec.get("log", False)), int(spec.get("step", 1)))
