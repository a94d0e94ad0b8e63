"""`train`: config -> data -> model -> engine, writing everything under `output_dir`."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import paddle

from paddle_ft import runtime
from paddle_ft.build import build_model, build_splits, build_tokenizer, model_meta, read_dataset, resolve_backbone
from paddle_ft.config import Config, load_config
from paddle_ft.engine import distributed
from paddle_ft.engine.amp import check_amp_supported
from paddle_ft.engine.cpu_linear import use_fast_linear
from paddle_ft.engine.evaluate import NonFiniteScores
from paddle_ft.engine.interrupt import TrainingInterrupted
from paddle_ft.engine.recompute import use_recompute
from paddle_ft.engine.run_folder import RunFolder
from paddle_ft.engine.trainer import TrainingDiverged, train
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.io import describe_os_error
from paddle_ft.log import log


def run(config_path: str, overrides: list[str]) -> int:
    config = load_config(config_path, overrides)
    if config.data.train is None:
        raise ConfigError("data.train", "training needs a training file; set data.train")
    check_amp_supported(config.train.amp, paddle.device.get_device())
    dist = distributed.from_environment()
    folder = RunFolder(Path(config.output_dir))
    resuming = config.train.resume is not None
    if resuming and dist.is_main:
        folder.recover()
    resume_from = folder.resume_checkpoint(config.train.resume)
    if dist.is_main:
        folder.prepare(resuming)
    seed_everything(config.seed)

    dataset = read_dataset(config.data)
    model_config = _resolve_backbone(config, dist)
    tokenizer = build_tokenizer(model_config)
    splits = build_splits(dataset, tokenizer, config.data.max_length, config.data.cache_dir)
    model = build_model(model_config, len(dataset.label_map), tokenizer, config.data.max_length)
    apply_runtime(model, config, dist)
    if dist.active:
        seed_everything(config.seed + dist.rank)  # same initial weights, a different dropout stream per rank
    if resume_from is not None:
        folder.check_resume_fits(config, dataset.label_map)
    if dist.is_main:
        folder.check_free_space(model, config.train.checkpoints.keep)
        folder.write_config(config, dataset.label_map)
    dist.barrier()  # if rank 0 refused the output_dir, the launcher stops the ranks waiting here
    folder = folder.with_model(tokenizer, model_meta(config, dataset.label_map))
    results = _train(model, splits, config, folder, dist, resume_from)
    if dist.is_main:
        for split in ("dev", "test"):
            if split in results:
                log(f"{split} accuracy {results[split]['accuracy']:.4f}  macro-F1 {results[split]['macro_f1']:.4f} "
                    f"(best model, step {results['best_step']})")
        log(f"wrote {folder.best_dir} and {folder.path / 'results.json'}")
    return 0


def _resolve_backbone(config: Config, dist):
    """Rank 0 converts a Hugging Face folder (once); the other ranks then find it in the cache."""
    if dist.is_main:
        resolved = resolve_backbone(config.model)
    dist.barrier()
    return resolved if dist.is_main else resolve_backbone(config.model)


def _train(model, splits, config: Config, folder: RunFolder, dist, resume_from: Path | None) -> dict:
    """The engine, with the exits a user meets turned into one line that says how to go on."""
    resume_command = folder.resume_command(dist.active)
    try:
        results = train(model, splits, config, folder, dist, resume_from)
    except TrainingInterrupted as exc:
        dist.shutdown()  # every rank stopped after the same step
        raise exc.with_resume_command(resume_command) from None
    except (TrainingDiverged, NonFiniteScores):
        dist.shutdown()
        raise
    except OSError as exc:  # a full disk: every write is atomic, so the last complete checkpoint is intact
        problem = describe_os_error(exc, then=f"resume with: {resume_command} (the last complete checkpoint is "
                                              "intact)")
        if problem is None:
            raise
        raise UserError(problem) from None
    dist.shutdown()
    return results


def apply_runtime(model, config: Config, dist) -> None:
    """The train.runtime settings: CPU threads, matmul-only linear gradients, activation recomputation."""
    settings = runtime.apply_cpu_settings(config.train.runtime.cpu_threads)
    fast = paddle.device.get_device().startswith("cpu") and config.train.runtime.fast_cpu_linear
    if fast:
        use_fast_linear(model)
    if config.train.runtime.recompute:
        use_recompute(model)
    if dist.is_main:
        log(runtime.describe(settings) + (", matmul-only linear gradients" if fast else "")
            + (", recomputed encoder layers" if config.train.runtime.recompute else ""))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)
