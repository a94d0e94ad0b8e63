"""What every training workflow (training, pretraining, distillation) does around the engine: open the run folder,
seed, apply the runtime settings, write the run's config, and turn the exits a user meets into one line that says how
to go on."""
from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Callable

import numpy as np
import paddle

from paddle_ft import runtime
from paddle_ft.analysis.audit import unknown_shares
from paddle_ft.artifacts.bundle import seal_bundle
from paddle_ft.artifacts.manifest import data_file
from paddle_ft.artifacts.ownership import OUTPUT_DIR, owned_folder
from paddle_ft.artifacts.run import Results
from paddle_ft.config import Config, ModelConfig, config_to_dict
from paddle_ft.data.labels import LabelMap
from paddle_ft.data.readers import format_of, read_records
from paddle_ft.engine import distributed
from paddle_ft.engine.amp import bf16_on_cpu, check_amp_supported, set_tf32
from paddle_ft.engine.checkpoint import check_world_size
from paddle_ft.engine.evaluate import NonFiniteScores
from paddle_ft.engine.interrupt import TrainingInterrupted
from paddle_ft.engine.recompute import use_recompute
from paddle_ft.engine.run_folder import RunFolder
from paddle_ft.engine.trainer import TrainingDiverged
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.inference.drift import reference, text_length
from paddle_ft.io import describe_os_error
from paddle_ft.kernels import CpuSpeedups, speed_up_cpu_training
from paddle_ft.log import log
from paddle_ft.models.backbone import pretrained_source
from paddle_ft.workflows.build import Dataset, resolve_backbone


@contextlib.contextmanager
def opened_run(config: Config, kind: str):
    """(the distributed context, the run folder, the checkpoint to resume or None) for the block: the folder
    owned by `kind` and locked by rank 0 (`ownership`), created or recovered, every RNG seeded."""
    check_amp_supported(config.train.amp, paddle.device.get_device())
    dist = distributed.from_environment()
    folder = RunFolder(Path(config.output_dir))
    with owned_folder(folder.path, kind, OUTPUT_DIR) if dist.is_main else contextlib.nullcontext():
        resuming = config.train.resume is not None
        if resuming and dist.is_main:
            folder.recover()  # a run killed while saving: put best/ back, drop half-written folders
        resume_from = folder.resume_checkpoint(config.train.resume)
        if dist.is_main:
            folder.prepare(resuming)
        seed_everything(config.seed)
        yield dist, folder, resume_from


def shared_backbone(model: ModelConfig, dist) -> ModelConfig:
    """Rank 0 converts a Hugging Face folder (once); the other ranks then find it in the cache."""
    if dist.is_main:
        resolved = resolve_backbone(model)
    dist.barrier()
    return resolved if dist.is_main else resolve_backbone(model)


def ready_to_train(model, config: Config, folder: RunFolder, dist, resume_from: Path | None,
                   label_map: LabelMap | None) -> None:
    """Runtime settings on the built model, the resume checked, space checked, the run's config written."""
    apply_runtime(model, config, dist)
    if dist.active:
        seed_everything(config.seed + dist.rank)  # same initial weights, a different dropout stream per rank
    if resume_from is not None:
        folder.check_resume_fits(config, label_map)  # before anything of the run is rewritten
        check_world_size(resume_from, dist.world_size)
    if dist.is_main:
        folder.check_free_space(model, config.train.checkpoints.keep)
        folder.write_config(config, label_map)
    dist.barrier()  # if rank 0 refused the output_dir, the launcher stops the ranks waiting here


def run_engine(training: Callable[[], Results | None], folder: RunFolder, dist, tool: str) -> Results | None:
    """`training` (the engine's `train` with its arguments, writing into `folder`), with the exits a user meets
    turned into one line that says how to go on (`tool`: the command that resumes it)."""
    resume_command = folder.resume_command(dist.active, tool)
    try:
        results = training()
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


def data_record(dataset: Dataset, corrections: str | None) -> dict:
    """Each data file of the run as best/'s manifest records it (path, sha256, rows used), taken when the files are
    read: a file edited while the model trains is not the one it learnt from. The review file of data.corrections
    is one of them (its rows: the rows it holds, decided or not)."""
    files = {split: data_file(path, len(dataset.examples[split])) for split, path in dataset.paths.items()}
    if corrections is not None:
        files["corrections"] = data_file(corrections, len(read_records(corrections, format_of(corrections, "tsv"),
                                                                         allow_empty=True)))
    return files


def seal_best(folder: RunFolder, config: Config, data: dict, results: Results, reference: dict | None) -> None:
    """best/'s model card and manifest, once the run has scored it: data, config, seed, scores, and the training
    side of drift (`drift.reference`)."""
    metrics = {split: report for split in ("dev", "test") if (report := getattr(results, split)) is not None}
    seal_bundle(folder.best_dir, folder.path.name, {"seed": config.seed, "config": config_to_dict(config),
                                                    "data": data, "metrics": metrics, "reference": reference,
                                                    "pretrained": pretrained_source(config.model.backbone)})


def drift_reference(dataset: Dataset, splits, unk_token_id: int | None) -> dict | None:
    """The training rows' label shares, text lengths and [UNK] share, for the server's drift gauges (a zero-shot
    model, trained on no row: those of the split it was scored on; None for one made from its label descriptions
    alone, which has no rows to compare live texts with: the server's drift gauges then read NaN)."""
    name = next((split for split in ("train", "dev", "test") if dataset.examples.get(split)), None)
    if name is None:
        return None
    rows = dataset.examples[name]
    tokens, _ = unknown_shares(getattr(splits, name).input_ids, unk_token_id)
    return reference([name for e in rows for name in e.label_names], dataset.label_map.names,
                     [text_length(e.text, e.text_pair) for e in rows], tokens)


def apply_runtime(model, config: Config, dist) -> None:
    """The train.runtime settings (CPU threads, matmul-only linear gradients, activation recomputation),
    train.amp.tf32 and, on a CPU, train.amp's bfloat16 matmuls."""
    settings = runtime.apply_cpu_settings(config.train.runtime.cpu_threads)
    set_tf32(config.train.amp.tf32)
    device = paddle.device.get_device()
    rt = config.train.runtime
    bf16, chosen = bf16_on_cpu(config.train.amp, device, linear_width(model), rt.fast_cpu_linear)
    speedups = speed_up_cpu_training(model, rt.fast_cpu_linear, rt.fused_kernels, bf16) if device.startswith("cpu") \
        else CpuSpeedups(False, 0)
    if rt.recompute:  # after the fused kernels: it recomputes the layer's forward as it is then
        use_recompute(model)
    if rt.packed_batches and not (device.startswith("cpu") and speedups.fused_layers):
        why_not = ("train.runtime.fused_kernels is false" if not rt.fused_kernels else
                   speedups.fused_unavailable or f"this run trains on {device}")
        raise ConfigError("train.runtime.packed_batches", f"packs texts on a CPU with the fused kernels, and {why_not}; "
                          "set it false")
    if speedups.fused_unavailable and dist.is_main:
        log(f"fused CPU kernels unavailable: {speedups.fused_unavailable}; training runs Paddle's own kernels "
            "(train.runtime.fused_kernels=false silences this)")
    if chosen and dist.is_main:
        log(chosen)
    if dist.is_main:
        log(runtime.describe(settings) + speedups.describe()
            + (", recomputed encoder layers" if rt.recompute else "")
            + (f", TF32 matmuls {tf32_state(config.train.amp.tf32)}" if device.startswith("gpu") else ""))


def tf32_state(setting: bool | None) -> str:
    """How the run's GPU float32 matmuls stand, for the settings line: as set, or as Paddle has them."""
    from paddle.base import core

    state = "on" if core.get_cublas_switch() else "off"
    return state if setting is not None else f"{state} (Paddle's setting; train.amp.tf32 changes it)"


def linear_width(model) -> int:
    """The narrowest input of the model's linear layers: its hidden size (what bfloat16 matmuls pay by)."""
    widths = [layer.weight.shape[0] for layer in model.sublayers() if isinstance(layer, paddle.nn.Linear)]
    return min(widths, default=0)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)
