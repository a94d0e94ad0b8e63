"""K folds of a config's labelled rows (train + dev), each trained as a normal run folder (ROOT/fold-N, resumable):
what `cv` and `label-issues` share. A fold already finished is not trained again."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paddle_ft.analysis.cv import stratified_folds
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.config import Config
from paddle_ft.data.readers import Columns, Example, write_examples
from paddle_ft.errors import ConfigError
from paddle_ft.log import log
from paddle_ft.workflows import training
from paddle_ft.workflows.build import Dataset, format_of_split, read_dataset


@dataclass(frozen=True)
class Pool:
    """The labelled rows the folds are cut from: train's, then dev's."""

    dataset: Dataset
    examples: list[Example]
    origins: list[tuple[str, int]]
    """(file, line) each row was read from."""


@dataclass(frozen=True)
class Fold:
    number: int
    held_out: np.ndarray
    """Positions in the pool of the rows this fold's run did not train on."""
    run: RunFiles


def labelled_pool(config: Config, folds: int) -> Pool:
    dataset = read_dataset(config.data, config.task)
    examples, origins = [], []
    for split in ("train", "dev"):
        rows = dataset.examples.get(split, [])
        examples += rows
        origins += [(dataset.paths[split], e.line) for e in rows]
    if folds < 2 or folds > len(examples):
        raise ConfigError("--folds", f"is {folds}: give 2 to {len(examples)} (the labelled rows of train and dev)")
    counts = Counter(name for e in examples for name in e.label_names)
    rare = sorted(name for name in dataset.label_map.names if counts[name] == 1)
    if rare:  # held out, its only row would leave that fold's training without the label it is scored on
        raise ConfigError("--folds", f"cannot fold these rows: the label '{rare[0]}' has one row in "
                          "train and dev, and every label needs at least 2 (one to train on while another is held "
                          "out); add rows of it, or leave it out")
    return Pool(dataset, examples, origins)


def train_folds(config_path: str | None, overrides: list[str], config: Config, pool: Pool, folds: int,
                root: Path) -> list[Fold]:
    """Each fold trained on the others (stratified by label), its held-out rows as its dev split."""
    parts = stratified_folds([e.label_key for e in pool.examples], folds, config.seed)
    fmt = format_of_split(config.data, config.data.train)
    columns, suffix = Columns.of(config.data, config.task == "multi_label"), f".{fmt}"
    done = []
    for number, held_out in enumerate(parts, start=1):
        run, data = RunFiles(root / f"fold-{number}"), root / "folds" / f"fold-{number}"
        if not run.finished:
            data.mkdir(parents=True, exist_ok=True)
            kept = set(held_out.tolist())
            write_examples(data / f"train{suffix}", fmt, columns,
                           [e for i, e in enumerate(pool.examples) if i not in kept])
            write_examples(data / f"dev{suffix}", fmt, columns, [pool.examples[i] for i in held_out])
            log(f"fold {number} of {folds}: {len(pool.examples) - len(held_out)} rows to train, {len(held_out)} "
                "held out")
            resume = ["train.resume=auto"] if run.started else []
            # the pool already holds any corrections: the folds' files are written with them
            training.train(config_path, [*overrides, f"output_dir={run.path}", f"data.train={data / f'train{suffix}'}",
                                    f"data.dev={data / f'dev{suffix}'}", "data.corrections=null",
                                    "data.header=true", *resume])  # write_examples writes a header
        done.append(Fold(number, held_out, run))
    return done
