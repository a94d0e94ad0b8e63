"""`cv`: K-fold cross-validation of a config: stratified folds of train (+ dev), one normal run folder per fold
(OUT/fold-1 ... each resumable), then the mean ± std of every metric in OUT/cv.json and OUT/cv.md."""
from __future__ import annotations

import json
from pathlib import Path

from paddle_ft.analysis.cv import markdown, stratified_folds, summarise
from paddle_ft.analysis.fingerprint import check_same_work, fingerprint
from paddle_ft.analysis.report import table_html, write_page
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.build import columns_of, format_of_split, read_dataset
from paddle_ft.commands import train
from paddle_ft.config import load_config
from paddle_ft.data.readers import write_examples
from paddle_ft.errors import ConfigError
from paddle_ft.io import write_text_atomically
from paddle_ft.log import log
from paddle_ft.ownership import OUTPUT_DIR, clear, owned_folder

FINGERPRINT = "cv-fingerprint.json"


def run(config_path: str, overrides: list[str], folds: int, restart: bool = False) -> int:
    config = load_config(config_path, overrides)
    with owned_folder(config.output_dir, "cv", OUTPUT_DIR) as root:
        if restart:
            clear(root)
        work = fingerprint(config, folds=folds)
        check_same_work(root, _read_fingerprint(root), work, "cross-validation")
        return _cross_validate(config_path, overrides, config, folds, root, work)


def _read_fingerprint(root: Path) -> dict | None:
    path = root / FINGERPRINT
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _cross_validate(config_path: str, overrides: list[str], config, folds: int, root: Path, work: dict) -> int:
    dataset = read_dataset(config.data, config.task)
    pool = dataset.examples.get("train", []) + dataset.examples.get("dev", [])
    if folds < 2 or folds > len(pool):
        raise ConfigError("--folds", f"is {folds}: give 2 to {len(pool)} (the labelled rows of train and dev)")
    write_text_atomically(root / FINGERPRINT, json.dumps(work, ensure_ascii=False, indent=2))  # what the folds are of
    parts = stratified_folds([e.label_key for e in pool], folds, config.seed)
    fmt = format_of_split(config.data, config.data.train)
    columns, suffix = columns_of(config.data, config.task), f".{fmt}"
    results = []
    for number, held_out in enumerate(parts, start=1):
        folder, data = RunFiles(root / f"fold-{number}"), root / "folds" / f"fold-{number}"
        if not folder.finished:
            data.mkdir(parents=True, exist_ok=True)
            kept = set(held_out.tolist())
            write_examples(data / f"train{suffix}", fmt, columns,
                           [e for i, e in enumerate(pool) if i not in kept])
            write_examples(data / f"dev{suffix}", fmt, columns, [pool[i] for i in held_out])
            log(f"cv: fold {number} of {folds}: {len(pool) - len(held_out)} rows to train, {len(held_out)} held out")
            resume = ["train.resume=auto"] if folder.started else []
            train.run(config_path, [*overrides, f"output_dir={folder.path}", f"data.train={data / f'train{suffix}'}",
                                    f"data.dev={data / f'dev{suffix}'}", *resume])
        results.append(folder.read_results())
    summary = summarise(results)
    write_text_atomically(root / "cv.json", json.dumps({"folds": folds, "summary": summary}, ensure_ascii=False,
                                                       indent=2))
    table = markdown(summary)
    write_text_atomically(root / "cv.md", table)
    links = "".join(f'<li><a href="fold-{i}/report.html">fold {i}</a></li>' for i in range(1, folds + 1))
    page = write_page(root / "report.html", f"{folds}-fold cross-validation", [
        "<h2>Every metric over the folds</h2>", table_html(table), f"<h2>The folds' own reports</h2><ul>{links}</ul>"])
    print(table, end="")
    log(f"wrote {root / 'cv.json'}, {root / 'cv.md'} and {page}")
    return 0
