"""`train`: config -> data -> model -> engine, writing everything under `output_dir`."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import paddle

from paddle_ft import runtime
from paddle_ft.build import build_model, build_splits, build_tokenizer, model_meta, read_dataset
from paddle_ft.config import Config, load_config, save_config
from paddle_ft.engine import distributed
from paddle_ft.engine.checkpoint import atomic_directory, check_complete, complete_checkpoints
from paddle_ft.engine.cpu_linear import use_fast_linear
from paddle_ft.engine.interrupt import TrainingInterrupted
from paddle_ft.engine.trainer import TrainingDiverged, log, train
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.model import save_model


def run(config_path: str, overrides: list[str]) -> int:
    config = load_config(config_path, overrides)
    if config.data.train is None:
        raise ConfigError("data.train", "training needs a training file; set data.train")
    dist = distributed.from_environment()
    output_dir = Path(config.output_dir)
    resume_from = find_resume_checkpoint(config, output_dir)
    if dist.is_main:
        prepare_output_dir(output_dir, resuming=resume_from is not None)
    seed_everything(config.seed)

    dataset = read_dataset(config.data)
    tokenizer = build_tokenizer(config.model)
    splits = build_splits(dataset, tokenizer, config.data.max_length, config.data.cache_dir)
    model = build_model(config.model, len(dataset.label_map), tokenizer)
    speed_up_cpu(model, config, dist)
    if dist.active:
        seed_everything(config.seed + dist.rank)  # same initial weights, a different dropout stream per rank
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
    except (TrainingInterrupted, TrainingDiverged):
        dist.shutdown()  # every rank stopped after the same step
        raise
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
        found = complete_checkpoints(output_dir / "checkpoints", warn=log)
        if found:
            return found[-1]
        if (output_dir / "metrics.jsonl").exists():
            raise UserError(f"{output_dir} holds a run but no complete checkpoint to resume from; "
                            "start a new run in another output_dir")
        log(f"train.resume=auto: no checkpoint in {output_dir} yet, starting a new run")
        return None
    path = Path(resume)
    try:
        check_complete(path)
    except UserError as exc:
        raise ConfigError("train.resume", str(exc)) from None
    return path


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
        raise ConfigError("output_dir", f"{output_dir} is not writable ({exc.strerror}); choose another "
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
