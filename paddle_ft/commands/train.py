"""`train`: config -> data -> model -> engine, writing everything under `output_dir`."""
from __future__ import annotations

import errno
import random
import shutil
from pathlib import Path

import numpy as np
import paddle

from paddle_ft import runtime
from paddle_ft.build import build_model, build_splits, build_tokenizer, model_meta, read_dataset
from paddle_ft.config import Config, config_to_dict, load_config, save_config
from paddle_ft.engine import distributed
from paddle_ft.engine.amp import check_amp_supported
from paddle_ft.data.labels import LabelMap
from paddle_ft.engine.checkpoint import newest_verified_checkpoint, verify_checkpoint
from paddle_ft.engine.cpu_linear import use_fast_linear
from paddle_ft.engine.interrupt import TrainingInterrupted
from paddle_ft.engine.evaluate import NonFiniteScores
from paddle_ft.engine.trainer import TrainingDiverged, train
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.io import atomic_directory, describe_os_error, recover_leftovers
from paddle_ft.log import log
from paddle_ft.model import save_model

# what a checkpoint's state depends on: a resume that changes any of them cannot continue the run exactly
RESUME_FIXED = ("seed", "model", "train.batch_size", "train.accumulate_steps", "data.max_length")


def run(config_path: str, overrides: list[str]) -> int:
    config = load_config(config_path, overrides)
    if config.data.train is None:
        raise ConfigError("data.train", "training needs a training file; set data.train")
    for key, value in (("train.eval_every", config.train.eval_every),
                       ("train.early_stopping_patience", config.train.early_stopping_patience)):
        if value and config.data.dev is None:
            raise ConfigError(key, f"is {value} but data.dev is not set, so nothing would be evaluated; set data.dev "
                              f"or {key}=0")
    check_amp_supported(config.train.amp, paddle.device.get_device())
    dist = distributed.from_environment()
    output_dir = Path(config.output_dir)
    if config.train.resume is not None and dist.is_main:
        for folder in (output_dir, output_dir / "checkpoints"):
            recover_leftovers(folder, log)  # a run killed while saving: put best/ back, drop half-written folders
    resume_from = find_resume_checkpoint(config, output_dir)
    if dist.is_main:
        prepare_output_dir(output_dir, resuming=config.train.resume is not None)
    seed_everything(config.seed)

    dataset = read_dataset(config.data)
    tokenizer = build_tokenizer(config.model)
    splits = build_splits(dataset, tokenizer, config.data.max_length, config.data.cache_dir)
    model = build_model(config.model, len(dataset.label_map), tokenizer)
    speed_up_cpu(model, config, dist)
    if dist.active:
        seed_everything(config.seed + dist.rank)  # same initial weights, a different dropout stream per rank
    if resume_from is not None:
        check_resume_fits_run(config, dataset.label_map, output_dir)  # before anything of the run is rewritten
    if dist.is_main:
        check_free_space(output_dir, model, config.train.save_total_limit)
        save_config(config, output_dir / "config.yaml")
        dataset.label_map.save(output_dir)
    dist.barrier()  # if rank 0 refused the output_dir, the launcher stops the ranks waiting here
    meta = model_meta(config)

    def save_best(trained, directory: Path) -> None:
        with atomic_directory(directory) as tmp:
            save_model(trained, tmp, meta)
            tokenizer.save_pretrained(str(tmp))
            dataset.label_map.save(tmp)

    resume_command = f"python tools/train.py --config {output_dir / 'config.yaml'} -o train.resume=auto"
    if dist.active:
        resume_command = f"the same paddle.distributed.launch options with {resume_command.removeprefix('python ')}"
    try:
        results = train(model, splits, config, output_dir, dataset.label_map.names, tokenizer.pad_token_id,
                        save_best, resume_from, resume_command, dist)
    except (TrainingInterrupted, TrainingDiverged, NonFiniteScores):
        dist.shutdown()  # every rank stopped after the same step
        raise
    except OSError as exc:  # a full disk: every write is atomic, so the last complete checkpoint is intact
        problem = describe_os_error(exc, then=f"resume with: {resume_command} (the last complete checkpoint is "
                                              "intact)")
        if problem is None:
            raise
        raise UserError(problem) from None
    dist.shutdown()
    if not dist.is_main:
        return 0
    for split in ("dev", "test"):
        if split in results:
            log(f"{split} accuracy {results[split]['accuracy']:.4f}  macro-F1 {results[split]['macro_f1']:.4f} "
                f"(best model, step {results['best_step']})")
    log(f"wrote {output_dir}/best and {output_dir}/results.json")
    return 0


def speed_up_cpu(model, config: Config, dist) -> None:
    settings = runtime.apply_cpu_settings(config.train.cpu_threads)
    on_cpu = paddle.device.get_device().startswith("cpu")
    if on_cpu and config.train.fast_cpu_linear:
        use_fast_linear(model)
    if dist.is_main:
        fast = ", matmul-only linear gradients" if on_cpu and config.train.fast_cpu_linear else ""
        log(runtime.describe(settings) + fast)


def find_resume_checkpoint(config: Config, output_dir: Path) -> Path | None:
    """The checkpoint `train.resume` names: `auto` = the newest complete one (None if there is none)."""
    resume = config.train.resume
    if resume is None:
        return None
    if resume == "auto":
        found = newest_verified_checkpoint(output_dir / "checkpoints", warn=log)
        if found:
            return found
        if (output_dir / "results.json").exists():  # a finished run: starting over would replace its best/
            raise UserError(f"{output_dir} holds a finished run and no complete checkpoint to resume from; start a "
                            "new run in another output_dir")
        # nothing to lose: a run stopped before its first checkpoint starts again from step 0
        log(f"train.resume=auto: no complete checkpoint in {output_dir} yet, starting the run from step 0")
        return None
    path = Path(resume)
    try:
        verify_checkpoint(path)
    except UserError as exc:  # CorruptCheckpoint included
        raise ConfigError("train.resume", str(exc)) from None
    return path


def check_resume_fits_run(config: Config, label_map: LabelMap, output_dir: Path) -> None:
    """A resume must continue the run it names: same labels and the settings its state depends on."""
    try:
        saved_labels = LabelMap.load(output_dir)
    except UserError:
        saved_labels = None  # a run stopped before it wrote them
    if saved_labels is not None and saved_labels != label_map:
        raise UserError(f"{output_dir} was trained with the labels {list(saved_labels.names)}, this data has "
                        f"{list(label_map.names)}; resume with the run's data, or start a new run in another "
                        "output_dir")
    if not (output_dir / "config.yaml").is_file():
        return
    before, now = _flat(config_to_dict(load_config(output_dir / "config.yaml"))), _flat(config_to_dict(config))
    for key in sorted(before.keys() | now.keys()):
        fixed = any(key == name or key.startswith(name + ".") for name in RESUME_FIXED)
        if fixed and before.get(key) != now.get(key):
            raise ConfigError(key, f"the run in {output_dir} was started with {before.get(key)!r}, this resume asks "
                              f"for {now.get(key)!r}; resume with the run's value (its config.yaml), or start a new run")


def _flat(tree: dict, prefix: str = "") -> dict:
    """{"model.scratch.num_layers": 2, ...} from the nested dict of a config."""
    flat = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{name}."))
        else:
            flat[prefix + name] = value
    return flat


def prepare_output_dir(output_dir: Path, resuming: bool) -> None:
    """Create `output_dir`; a folder that already holds a run is only reused to resume it."""
    if (output_dir / "metrics.jsonl").exists() and not resuming:
        raise UserError(f"{output_dir} already holds a training run; resume it with -o train.resume=auto, "
                        "or pick a new -o output_dir=...")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        problem = "a file stands in its way" if exc.errno in (errno.EEXIST, errno.ENOTDIR) else exc.strerror
        raise ConfigError("output_dir", f"{output_dir} cannot be created or written ({problem}); choose another "
                          "folder") from None


def check_free_space(output_dir: Path, model, keep: int) -> None:
    """Refuse to start when the disk cannot hold the checkpoints the run will keep."""
    weight_bytes = sum(int(np.prod(p.shape)) * 4 for p in model.parameters())
    # a checkpoint holds weights + two AdamW moments; `keep` of them, the best one, one being
    # written, and best/ itself
    needed = weight_bytes * 3 * (keep + 2) + weight_bytes
    free = shutil.disk_usage(output_dir).free
    if free < needed:
        raise UserError(f"{output_dir} has {free / 2**20:.0f} MiB free, but this run's checkpoints need about "
                        f"{needed / 2**20:.0f} MiB; free some space, lower train.save_total_limit, or choose "
                        "another output_dir")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)
