"""K-fold cross-validation of a config (the `cv` command's work): stratified folds of train (+ dev), one normal run
folder per fold (OUT/fold-1 ... each resumable), then the mean ± std of every metric in OUT/cv.json and OUT/cv.md."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.analysis.cv import markdown, summarise
from paddle_ft.analysis.fingerprint import check_same_work, fingerprint, read_work, write_work
from paddle_ft.analysis.report import table_html, write_page
from paddle_ft.artifacts.ownership import OUTPUT_DIR, clear, owned_folder
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.config import load_config
from paddle_ft.errors import UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.log import elapsed, log
from paddle_ft.workflows.folds import labelled_pool, train_folds
from paddle_ft.workflows.forecast import seconds_per_run

FINGERPRINT = "cv-fingerprint.json"


@dataclass(frozen=True)
class CrossValidation:
    """What `cross_validate` found and wrote."""

    summary: dict
    """{split: {metric: {"mean", "std", "folds"}}} (analysis.cv.summarise)."""
    table: str
    """The summary as a markdown table (cv.md)."""
    files: tuple[Path, ...]
    """cv.json, cv.md and the report page."""


def cross_validate(config_path: str, overrides: list[str], folds: int, restart: bool = False,
                   budget_minutes: float | None = None) -> CrossValidation:
    """Each of `folds` folds trained (or resumed) in the config's output_dir, then summarised. With a budget, the
    folds left are timed first (`forecast`) and refused, in one line, where they would not end within it."""
    config = load_config(config_path, overrides)
    with owned_folder(config.output_dir, "cv", OUTPUT_DIR) as root:
        if restart:
            clear(root)
        work = fingerprint(config, folds=folds)
        check_same_work(root, read_work(root / FINGERPRINT), work, "cross-validation")
        return _cross_validate(config_path, overrides, config, folds, root, work, budget_minutes)


def _cross_validate(config_path: str, overrides: list[str], config, folds: int, root: Path, work: dict,
                    budget_minutes: float | None) -> CrossValidation:
    pool = labelled_pool(config, folds)
    if budget_minutes is not None:
        _check_budget(config_path, overrides, len(pool.examples), folds, root, budget_minutes)
    write_work(root / FINGERPRINT, work)  # what the folds are of
    results = [fold.run.read_results() for fold in train_folds(config_path, overrides, config, pool, folds, root)]
    summary = summarise(results)
    write_text_atomically(root / "cv.json", json.dumps({"folds": folds, "summary": summary}, ensure_ascii=False,
                                                       indent=2))
    table = markdown(summary)
    write_text_atomically(root / "cv.md", table)
    reports = [i for i in range(1, folds + 1) if (root / f"fold-{i}" / "report.html").is_file()]  # as the config asked
    links = "".join(f'<li><a href="fold-{i}/report.html">fold {i}</a></li>' for i in reports)
    page = write_page(root / "report.html", f"{folds}-fold cross-validation", [
        "<h2>Every metric over the folds</h2>", table_html(table),
        *([f"<h2>The folds' own reports</h2><ul>{links}</ul>"] if reports else [])])
    return CrossValidation(summary, table, (root / "cv.json", root / "cv.md", page))


def _check_budget(config_path: str, overrides: list[str], rows: int, folds: int, root: Path,
                  budget_minutes: float) -> None:
    """Says what the folds left take here, as timed; refuses them where they would not end within the budget."""
    left = sum(1 for number in range(1, folds + 1) if not RunFiles(root / f"fold-{number}").finished)
    if not left:
        return
    log(f"cv --budget {budget_minutes:g}: timing a few training steps of the config here")
    each = seconds_per_run(config_path, overrides, train_rows=rows - rows // folds)
    fit = math.floor(budget_minutes * 60 / each)
    log(f"cv: a fold takes about {elapsed(each)} here; the {left} left about {elapsed(left * each)} ({min(fit, left)} "
        f"fit in {budget_minutes:g} minutes)")
    if fit < left:
        raise UserError(f"--budget {budget_minutes:g}: the {left} folds left take about {elapsed(left * each)} here, "
                        f"and {fit} fit; give more minutes, fewer --folds, or a shorter recipe (init --budget)")
