"""Hyperparameter search with Optuna over a config (the `sweep` command's work: python -m paddle_ft sweep --config C
--space S.yaml).

Each trial is a normal run folder (OUT/trial-N) trained by the training workflow with the trial's values as -o
overrides; its dev metric after each evaluation goes to Optuna's pruner, and the best dev metric is the trial's value.
The study lives in a database (default OUT/study.db, SQLite), so a stopped sweep goes on where it stopped when the
same command runs again: trials that finished are kept, and a trial that was cut off is run again from its folder's
last checkpoint. Each trial's sampler is seeded from (seed, trials finished so far), so on one machine a resumed sweep
ends with the same study as an uninterrupted one. Several machines can share one study through `--storage
postgresql://...` (their trials interleave; that sweep is not reproducible trial for trial).
"""
from __future__ import annotations

import contextlib
import dataclasses
import html
import math
import time
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.analysis.fingerprint import check_same_work, fingerprint
from paddle_ft.analysis.report import table_html, write_page
from paddle_ft.analysis.space import Space, load_space
from paddle_ft.artifacts.ownership import OUTPUT_DIR, clear, owned_folder
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.config import load_config, save_config
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.log import elapsed, log
from paddle_ft.workflows import training
from paddle_ft.workflows.build import read_dataset
from paddle_ft.workflows.forecast import seconds_per_run

HEARTBEAT_SECONDS = 10  # a trial whose process stops beating this long (x2) counts as cut off


@dataclass(frozen=True)
class SweepOutcome:
    """The finished sweep: its trials ranked, the best one, and what was written."""

    table: str
    """Every finished trial, best first, as a markdown table (sweep.md)."""
    best_trial: int
    best_value: float
    metric: str
    """The dev metric trials are ranked by."""
    best_config: Path
    """The config with the best trial's values (best-config.yaml)."""
    files: tuple[Path, ...]
    """sweep.md and the report page."""


@dataclass(frozen=True)
class Limits:
    """When a sweep stops starting trials."""

    trials: int | None = None
    """Trials finished in all (default: the space's)."""
    budget_minutes: float | None = None
    """No trial starts that would not end within this many minutes of the sweep's start, as timed (the first trial
    by `forecast`, the next ones by the trials this process ran, pruned ones included)."""


def sweep(config_path: str, overrides: list[str], space_path: str, storage: str | None = None,
          limits: Limits = Limits(), restart: bool = False) -> SweepOutcome:
    """Trials of the space over the config until `limits` stop it, in the config's output_dir (a rerun resumes the
    study there, or in `storage`)."""
    try:
        import optuna
    except ImportError:
        raise UserError("sweep runs on Optuna, which is not installed: pip install 'paddle_ft[sweep]' (or optuna)") \
            from None
    config = load_config(config_path, overrides)
    if config.data.dev is None:
        raise ConfigError("data.dev", "a sweep scores each trial on dev; set data.dev")
    space = load_space(Path(space_path))
    _check_space_values(space, Path(space_path), config_path, overrides)
    read_dataset(config.data, config.task)  # a bad data file is one line before trial 0, not Optuna's failed trial
    with owned_folder(config.output_dir, "sweep", OUTPUT_DIR) as root:
        if restart:
            clear(root)
        return _search(_study(root, space, storage, restart), config_path, overrides, config, space, root, limits)


def _check_space_values(space: Space, path: Path, config_path: str, overrides: list[str]) -> None:
    """Every value the space can give (each choice, each end of a range) loads as the config: a wrong key or value
    is found before trial 0, not when Optuna draws it."""
    for param in space.params:
        for value in param.choices if param.type == "categorical" else (param.low, param.high):
            value = int(value) if param.type == "int" else value
            try:
                load_config(config_path, [*overrides, f"{param.key}={value}"])
            except ConfigError as exc:
                raise UserError(f"{path}: params.{param.key}: the value {value!r} is refused by the config ({exc}); "
                                "fix the space") from None


def _study(root: Path, space: Space, storage: str | None, restart: bool):
    """The Optuna study of the sweep in `root`: in `storage` (default: root/study.db), created or resumed."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage or f"sqlite:///{(root / 'study.db').resolve()}"
    rdb = optuna.storages.RDBStorage(url, heartbeat_interval=HEARTBEAT_SECONDS, grace_period=2 * HEARTBEAT_SECONDS)
    if restart and storage:  # a shared database: the study is not in the folder just cleared
        with contextlib.suppress(KeyError):
            optuna.delete_study(study_name=root.name, storage=rdb)
    return optuna.create_study(
        storage=rdb, study_name=root.name, direction="maximize", load_if_exists=True,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2) if space.pruner == "median" else
        optuna.pruners.NopPruner())


def _search(study, config_path: str, overrides: list[str], config, space: Space, root: Path,
            limits: Limits) -> SweepOutcome:
    ranges = {f"params.{p.key}": {k: v for k, v in dataclasses.asdict(p).items() if k != "key"} for p in space.params}
    work = fingerprint(config, space={**ranges, "sampler": space.sampler, "pruner": space.pruner})
    check_same_work(root, study.user_attrs.get("fingerprint"), work, "sweep")
    study.set_user_attr("fingerprint", work)
    target = limits.trials or space.trials
    clock = _Budget(limits.budget_minutes, config_path, overrides, target - len(_finished(study)))
    while (done := len(_finished(study))) < target and clock.allows_another(done, target):
        study.sampler = _sampler(space, config.seed * 1000 + done)
        with clock.trial():
            study.optimize(lambda trial: _trial(trial, study, space, config_path, overrides, root,
                                                config.train.evaluation.metric), n_trials=1)
    return _write_outcome(study, space, config_path, overrides, root, config.train.evaluation.metric)


def _trial(trial, study, space: Space, config_path: str, overrides: list[str], root: Path, metric: str) -> float:
    import optuna

    values = {p.key: p.suggest(trial) for p in space.params}
    folder = _folder_of(study, trial, values, root)
    trial.set_user_attr("folder", str(folder))
    resume = ["train.resume=auto"] if RunFiles(folder).started else []

    def on_eval(step: int, value: float) -> None:
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned()

    log(f"sweep: trial {trial.number}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    training.train(config_path, [*overrides, *(f"{k}={v}" for k, v in values.items()), f"output_dir={folder}",
                                 *resume], on_eval)
    return RunFiles(folder).read_results().dev[metric]


class _Budget:
    """The sweep's clock under --budget: a trial starts only where the trials so far (or, before any, `forecast`)
    say it ends within the budget. Without a budget it allows every trial."""

    def __init__(self, minutes: float | None, config_path: str, overrides: list[str], left: int):
        self.minutes, self.started, self.durations = minutes, time.monotonic(), []
        if minutes is None or left <= 0:
            return
        log(f"sweep --budget {minutes:g}: timing a few training steps of the config here")
        self.first = seconds_per_run(config_path, overrides)
        fit = math.floor(minutes * 60 / self.first)
        if fit < 1:
            raise UserError(f"--budget {minutes:g}: one trial takes about {elapsed(self.first)} here (unpruned); "
                            "give more minutes, or a shorter recipe (init --budget)")
        log(f"sweep: a trial takes about {elapsed(self.first)} here, unpruned: {min(fit, left)} of the {left} left fit "
            f"in {minutes:g} minutes (pruned trials end sooner; no trial starts that would end after it)")

    @contextlib.contextmanager
    def trial(self):
        started = time.monotonic()
        yield
        self.durations.append(time.monotonic() - started)

    def allows_another(self, done: int, target: int) -> bool:
        if self.minutes is None:
            return True
        expected = sum(self.durations) / len(self.durations) if self.durations else self.first
        if time.monotonic() - self.started + expected <= self.minutes * 60:
            return True
        log(f"sweep: stopping at {done} of {target} trials: the next would take about {elapsed(expected)}, beyond "
            f"--budget {self.minutes:g} (a rerun with more minutes goes on from here)")
        return False


def _folder_of(study, trial, values: dict, root: Path) -> Path:
    """The folder of an earlier trial with these values that was cut off (resumed from its checkpoint), else a
    new one."""
    from optuna.trial import TrialState

    for earlier in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.FAIL)):
        folder = earlier.user_attrs.get("folder")
        if earlier.number != trial.number and earlier.params == values and folder and \
                not RunFiles(Path(folder)).finished:
            return Path(folder)
    return root / f"trial-{trial.number}"


def _finished(study) -> list:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))


def _sampler(space: Space, seed: int):
    import optuna

    if space.sampler == "grid":
        return optuna.samplers.GridSampler(space.grid(), seed=seed)
    if space.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(4, space.trials))


def _write_outcome(study, space: Space, config_path: str, overrides: list[str], root: Path,
                   metric: str) -> SweepOutcome:
    """best-config.yaml (the config with the best trial's values) and sweep.md, the trials ranked."""
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        raise UserError(f"no trial of the sweep in {root} finished (all pruned or failed); widen the space")
    best = max(complete, key=lambda t: t.value)
    config = load_config(config_path, [*overrides, *(f"{k}={v}" for k, v in best.params.items())])
    save_config(config, root / "best-config.yaml")
    ranked = sorted(_finished(study), key=lambda t: (t.state != TrialState.COMPLETE, -(t.value or 0)))
    lines = [f"| rank | trial | dev {metric} | state | " + " | ".join(p.key for p in space.params) + " |",
             "|---:|---:|---:|---|" + "---|" * len(space.params)]
    for rank, t in enumerate(ranked, start=1):
        value = f"{t.value:.4f}" if t.value is not None else "pruned"
        lines.append(f"| {rank} | {t.number} | {value} | {t.state.name.lower()} | "
                     + " | ".join(str(t.params.get(p.key)) for p in space.params) + " |")
    write_text_atomically(root / "sweep.md", "\n".join(lines) + "\n")
    best_folder = Path(best.user_attrs["folder"])
    link = (f'<p>The best trial\'s own report: <a href="{html.escape(best_folder.name)}/report.html">trial '
            f'{best.number}</a>.</p>'
            if (best_folder / "report.html").is_file() else  # as the config asked
            f"<p>The best trial's run: {html.escape(best_folder.name)} (python -m paddle_ft report "
            f"{html.escape(str(best_folder))} writes its page).</p>")
    page = write_page(root / "report.html", f"sweep {root.name}", [
        "<h2>Trials, best first</h2>", table_html("\n".join(lines)), link])
    return SweepOutcome("\n".join(lines), best.number, best.value, metric, root / "best-config.yaml",
                        (root / "sweep.md", page))
