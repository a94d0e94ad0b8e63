"""A training run's folder (`output_dir`) as training uses it: prepared, recovered, resumed, written. Its layout
and file formats belong to `artifacts.run`; this module goes through `RunFiles`."""
from __future__ import annotations

import errno
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from paddle_ft.artifacts.bundle import load_weights, save_bundle
from paddle_ft.artifacts.meta import Decision, ModelMeta
from paddle_ft.artifacts.run import Results, RunFiles
from paddle_ft.config import Config, config_to_dict, flat_config, load_config, save_config
from paddle_ft.data.labels import LabelMap
from paddle_ft.engine.checkpoint import newest_verified_checkpoint, verify_checkpoint
from paddle_ft.engine.events import EventLog
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.io import open_own_file, recover_leftovers
from paddle_ft.log import log
from paddle_ft.models.backbone import load_pretraining_weights, save_backbone

# what a checkpoint's state depends on: a resume that changes any of them cannot continue the run exactly
RESUME_FIXED = ("seed", "task", "model", "train.batch_size", "train.accumulate_steps", "data.max_length",
                "data.text_pair_column", "data.truncation", "pretrain.objective")


@dataclass(frozen=True)
class RunFolder:
    path: Path
    save_model: Callable | None = None
    """(directory, model, dev report or None) -> None: how best/ is written; set by `with_classifier` or
    `with_encoder`."""
    load_model_weights: Callable | None = None
    """(model, directory) -> None: how best/'s weights are read back for the final scores."""

    def with_classifier(self, tokenizer, meta: ModelMeta) -> RunFolder:
        """best/ is a classifier bundle (`bundle`): what eval, export and predict read."""
        def save(directory: Path, model, dev_report: dict | None) -> None:
            save_bundle(directory, model, tokenizer, meta.deciding(Decision.from_report(dev_report, meta.labels)))

        return replace(self, save_model=save, load_model_weights=load_weights)

    def with_encoder(self, tokenizer) -> RunFolder:
        """best/ is a pretrained encoder folder (`backbone`): what model.backbone loads."""
        return replace(self, save_model=lambda directory, model, _: save_backbone(directory, model, tokenizer),
                       load_model_weights=load_pretraining_weights)

    @property
    def files(self) -> RunFiles:
        return RunFiles(self.path)

    @property
    def best_dir(self) -> Path:
        return self.files.best_dir

    @property
    def checkpoints_dir(self) -> Path:
        return self.files.checkpoints_dir

    # ------------------------------------------------------------------ before training

    def prepare(self, resuming: bool) -> None:
        """Create the folder; one that already holds a run is only reused to resume it."""
        if self.files.started and not resuming:
            raise UserError(f"{self.path} already holds a training run; resume it with -o train.resume=auto, "
                            "or pick a new -o output_dir=...")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            with open_own_file(probe) as handle:
                handle.write("ok")
            probe.unlink()
        except OSError as exc:
            problem = "a file stands in its way" if exc.errno in (errno.EEXIST, errno.ENOTDIR) else exc.strerror
            raise ConfigError("output_dir", f"{self.path} cannot be created or written ({problem}); choose another "
                              "folder") from None

    def recover(self) -> None:
        """A run killed while saving: put best/ back, drop half-written folders."""
        for folder in (self.path, self.checkpoints_dir):
            recover_leftovers(folder, log)

    def resume_checkpoint(self, resume: str | None) -> Path | None:
        """The checkpoint `train.resume` names: `auto` = the newest complete one (None if there is none)."""
        if resume is None:
            return None
        if resume != "auto":
            try:
                verify_checkpoint(Path(resume))
            except UserError as exc:  # CorruptCheckpoint included
                raise ConfigError("train.resume", str(exc)) from None
            return Path(resume)
        found = newest_verified_checkpoint(self.checkpoints_dir, warn=log)
        if found:
            return found
        if self.files.finished:  # a finished run: starting over would replace its best/
            raise UserError(f"{self.path} holds a finished run and no complete checkpoint to resume from; start a "
                            "new run in another output_dir")
        # nothing to lose: a run stopped before its first checkpoint starts again from step 0
        log(f"train.resume=auto: no complete checkpoint in {self.path} yet, starting the run from step 0")
        return None

    def check_resume_fits(self, config: Config, label_map: LabelMap | None) -> None:
        """A resume must continue the run it names: same labels and the settings its state depends on.
        Called before anything of the run is rewritten."""
        try:
            saved_labels = LabelMap.load(self.path)
        except UserError:
            saved_labels = None  # a run stopped before it wrote them
        if saved_labels is not None and label_map is not None and saved_labels != label_map:
            raise UserError(f"{self.path} was trained with the labels {list(saved_labels.names)}, this data has "
                            f"{list(label_map.names)}; resume with the run's data, or start a new run in another "
                            "output_dir")
        if not self.files.config_file.is_file():
            return
        before = flat_config(config_to_dict(load_config(self.files.config_file)))
        now = flat_config(config_to_dict(config))
        for key in sorted(before.keys() | now.keys()):
            fixed = any(key == name or key.startswith(name + ".") for name in RESUME_FIXED)
            if fixed and before.get(key) != now.get(key):
                raise ConfigError(key, f"the run in {self.path} was started with {before.get(key)!r}, this resume "
                                  f"asks for {now.get(key)!r}; resume with the run's value (its config.yaml), or "
                                  "start a new run")

    def check_free_space(self, model, keep: int) -> None:
        """Refuse to start when the disk cannot hold the checkpoints the run will keep."""
        weight_bytes = sum(int(np.prod(p.shape)) * 4 for p in model.parameters())
        # a checkpoint holds weights + two AdamW moments; `keep` of them, the best one, one being
        # written, and best/ itself
        needed = weight_bytes * 3 * (keep + 2) + weight_bytes
        free = shutil.disk_usage(self.path).free
        if free < needed:
            raise UserError(f"{self.path} has {free / 2**20:.0f} MiB free, but this run's checkpoints need about "
                            f"{needed / 2**20:.0f} MiB; free some space, lower train.checkpoints.keep, or choose "
                            "another output_dir")

    def write_config(self, config: Config, label_map: LabelMap | None) -> None:
        """config.yaml, and label_map.json for a classifier (pretraining has no labels)."""
        save_config(config, self.files.config_file)
        if label_map is not None:
            label_map.save(self.path)

    def resume_command(self, distributed: bool, command: str = "train") -> str:
        """The command line that resumes this run: the package's (it works installed and from a checkout); the
        launcher takes a script, so a run of several processes resumes through the checkout's tools/ wrapper."""
        rest = f"--config {self.files.config_file} -o train.resume=auto"
        if distributed:
            return f"the same paddle.distributed.launch options with tools/{command}.py {rest}"
        return f"python -m paddle_ft {command} {rest}"

    # ------------------------------------------------------------------ while and after training

    def event_log(self, resumed_at_step: int | None) -> EventLog:
        """metrics.jsonl and vdl/; on a resume the events after the checkpoint's step are dropped."""
        return EventLog(self.files, keep_until_step=resumed_at_step)

    def save_best(self, model, dev_report: dict | None) -> None:
        """best/ from `model`, with what the dev evaluation `dev_report` decided (a multi-label model's thresholds)."""
        self.save_model(self.best_dir, model, dev_report)

    def load_best_weights(self, model) -> None:
        self.load_model_weights(model, self.best_dir)

    def write_results(self, results: Results) -> None:
        self.files.write_results(results)
