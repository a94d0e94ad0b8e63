"""Checkpoints that resume a run exactly, written atomically (temporary folder, then rename).

`checkpoints/step-N/` holds model, optimizer, LR scheduler and GradScaler state, the RNG states of
python, numpy and paddle, `trainer_state.json` (data position, best metric, early stopping, log
window), and last `checksums.json`: the SHA-256 of every other file. A folder without it is
incomplete; one whose files do not match it is corrupt (a truncated or garbled file), and resuming
skips it for the previous one.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from paddle_ft.errors import UserError
from paddle_ft.io import atomic_directory, file_sha256, write_bytes_hashed
from paddle_ft.models.convert import PADDLE_WEIGHTS
from paddle_ft.models.networks import in_dtypes_of
from paddle_ft.models.state_file import save_state

TRAINER_STATE = "trainer_state.json"
CHECKSUMS = "checksums.json"
STATE_FILES = (PADDLE_WEIGHTS, "optimizer.pdopt", "scheduler.pdparams", "scaler.pdparams", "rng.pdstate",
               TRAINER_STATE)


class CorruptCheckpoint(UserError):
    """A checkpoint file is missing, or its bytes differ from what was written."""


@dataclass
class TrainState:
    """Where training is; everything besides tensors that an exact resume needs."""

    global_step: int = 0
    epoch: int = 0
    """The epoch the next step belongs to."""
    epoch_steps_done: int = 0
    """Optimizer steps of `epoch` already taken (the data position)."""
    best_metric: float | None = None
    best_step: int | None = None
    evals_since_best: int = 0
    skipped_steps: int = 0
    """Updates skipped for inf/NaN (float16 overflow or a non-finite loss)."""
    nonfinite_streak: int = 0
    window_loss_sum: float = 0.0
    """Loss (mean over ranks) summed over the finite steps since the last log line, so that logged means
    match after a resume."""
    window_steps: int = 0

    def record_step(self, loss: float | None, skipped: bool, end_of_epoch: bool) -> None:
        """Account for one optimizer step; `loss` is None when it was not finite."""
        self.global_step += 1
        self.skipped_steps += skipped
        self.nonfinite_streak = 0 if loss is not None else self.nonfinite_streak + 1
        if loss is not None:  # a non-finite step is counted in skipped_steps, not averaged in
            self.window_loss_sum += loss
            self.window_steps += 1
        self.epoch, self.epoch_steps_done = (self.epoch + 1, 0) if end_of_epoch else \
            (self.epoch, self.epoch_steps_done + 1)

    def take_window_loss(self) -> float | None:
        """Mean loss since the last call (None if no step was finite); starts the next window."""
        mean = self.window_loss_sum / self.window_steps if self.window_steps else None
        self.window_loss_sum, self.window_steps = 0.0, 0
        return mean

    def record_eval(self, metric: float) -> bool:
        """Account for an evaluation; True when it is the best so far (the first of equal scores wins)."""
        if self.best_metric is None or metric > self.best_metric:
            self.best_metric, self.best_step, self.evals_since_best = metric, self.global_step, 0
            return True
        self.evals_since_best += 1
        return False


def capture_rng() -> dict:
    """This process's python, numpy and paddle RNG states: paddle's CPU generator and, on a GPU, the
    generator of the one device this process uses. (`paddle.get_rng_state()` returns one state per
    visible GPU, and restoring it where another number of GPUs is visible fails.)"""
    from paddle.base import core

    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "paddle_cpu": core.default_cpu_generator().get_state()}
    gpu = _gpu_id()
    if gpu is not None:
        state["paddle_gpu"] = core.default_cuda_generator(gpu).get_state()
    return state


def restore_rng(state: dict) -> None:
    """Put back what `capture_rng` took, on the GPU this process uses (whichever id it has here)."""
    from paddle.base import core

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    core.default_cpu_generator().set_state(state["paddle_cpu"])
    gpu = _gpu_id()
    if gpu is not None and "paddle_gpu" in state:
        core.default_cuda_generator(gpu).set_state(state["paddle_gpu"])


def _gpu_id() -> int | None:
    device = paddle.device.get_device()  # "cpu" or "gpu:N"
    return int(device.split(":")[1]) if device.startswith("gpu:") else None


def save_checkpoint(checkpoints_dir: Path, model, optimizer, scheduler, scaler, state: TrainState,
                    rng_states: list[dict] | None = None) -> Path:
    """Write step-N atomically; `rng_states` holds one entry per rank (default: this process's)."""
    final = checkpoints_dir / f"step-{state.global_step}"
    with atomic_directory(final) as tmp:
        # each file hashed as it is written (a bert-base checkpoint is 1.3 GB: not read back to be hashed)
        checksums = {PADDLE_WEIGHTS: save_state(model.state_dict(), tmp / PADDLE_WEIGHTS),  # one tensor at a time
                     "optimizer.pdopt": save_state(_rename_keys(optimizer.state_dict(), _internal_to_structured(model)),
                                                   tmp / "optimizer.pdopt"),
                     "scheduler.pdparams": save_state(scheduler.state_dict(), tmp / "scheduler.pdparams"),
                     # {} when loss scaling is off
                     "scaler.pdparams": write_bytes_hashed(tmp / "scaler.pdparams", pickle.dumps(scaler.state_dict())),
                     # paddle.load cannot read these types back
                     "rng.pdstate": write_bytes_hashed(tmp / "rng.pdstate", pickle.dumps(rng_states or [capture_rng()])),
                     TRAINER_STATE: write_bytes_hashed(tmp / TRAINER_STATE,
                                                       json.dumps(dataclasses.asdict(state), indent=2).encode())}
        (tmp / CHECKSUMS).write_text(json.dumps({"sha256": checksums}, indent=2))  # last: marks it complete
    return final


def check_world_size(path: Path, world_size: int) -> None:
    """A checkpoint resumes exactly only with the number of processes that wrote it (one RNG state each): another
    number trains on with another effective batch, sampler and schedule. Refused in one line naming both."""
    written_by = len(pickle.loads((path / "rng.pdstate").read_bytes()))
    if written_by != world_size:
        raise UserError(f"checkpoint {path} was written by {written_by} process(es) and this run has {world_size}: "
                        f"its batches, data order and schedule hold for {written_by} only; resume with {written_by} "
                        "(python -m paddle.distributed.launch --nproc_per_node / --gpus), or start a new run in "
                        "another output_dir")


def load_checkpoint(path: Path, model, optimizer, scheduler, scaler, rank: int = 0) -> TrainState:
    """Restore everything `save_checkpoint` wrote into the given objects; returns the trainer state.
    `path` is a checkpoint `verify_checkpoint` passed (`workflows.training` picks it that way: hashing a
    large model's files twice would double the cost of every resume) and `check_world_size` passed (a run's
    resume checks it before anything is rewritten, `workflows.session`); it must fit the model (same
    parameter names and shapes)."""
    model_state = paddle.load(str(path / PADDLE_WEIGHTS))
    _check_fits(path, model_state, model)
    model.set_state_dict(in_dtypes_of(model, model_state))
    structured_to_internal = {v: k for k, v in _internal_to_structured(model).items()}
    optimizer.set_state_dict(_with_master_names(_rename_keys(paddle.load(str(path / "optimizer.pdopt")),
                                                             structured_to_internal)))
    scheduler.set_state_dict(paddle.load(str(path / "scheduler.pdparams")))
    scaler_state = pickle.loads((path / "scaler.pdparams").read_bytes())
    if scaler_state:
        scaler.load_state_dict(scaler_state)
    restore_rng(pickle.loads((path / "rng.pdstate").read_bytes())[rank])
    return TrainState(**json.loads((path / TRAINER_STATE).read_text()))


def _check_fits(path: Path, saved: dict, model) -> None:
    """Paddle would load a smaller model's weights with a warning (dropping the rest) or fail on an
    assertion; a resume must restore every weight, so any difference is refused by name."""
    expected = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    found = {name: list(tensor.shape) for name, tensor in saved.items()}
    for name in sorted(expected.keys() | found.keys()):
        if expected.get(name) != found.get(name):
            raise UserError(f"checkpoint {path} does not fit this model: weight '{name}' has shape "
                            f"{found.get(name, 'absent')} there and {expected.get(name, 'absent')} here; resume with "
                            "the model settings the run was started with")


def _internal_to_structured(model) -> dict[str, str]:
    return {p.name: name for name, p in model.named_parameters()}


def _rename_keys(state: dict, names: dict[str, str]) -> dict:
    """Optimizer state is keyed by internal parameter names (`linear_3.w_0_moment1_0`), which depend on
    how many layers the process built before; save it under the model's structured names instead."""
    by_length = sorted(names, key=len, reverse=True)

    def rename(key: str) -> str:
        for old in by_length:
            if key == old or key.startswith(old + "_"):
                return names[old] + key[len(old):]
        return key

    return {rename(k): ({rename(n): t for n, t in v.items()} if k == "master_weights" else v)
            for k, v in state.items()}


def _with_master_names(state: dict) -> dict:
    """AMP O2's float32 master weights keep the name they had in the process that saved them
    (`linear_3.w_0_fp32_master_0`), and AdamW finds their moments by that name: where this process numbered its
    layers otherwise (a sweep's next trial, the Python API after other models), the first step asserts. Each is
    renamed after its parameter's name here (the dict's key, already renamed)."""
    for parameter_name, master in state.get("master_weights", {}).items():
        if "_fp32_master" in master.name:
            master.name = parameter_name + master.name[master.name.rindex("_fp32_master"):]
    return state


def is_complete(folder: Path) -> bool:
    """Cheap: its checksums, written last, are there (the files are checked by `verify_checkpoint`)."""
    return (folder / CHECKSUMS).is_file()


def verify_checkpoint(path: Path) -> None:
    """Raise `CorruptCheckpoint` naming the first file that is missing or differs from its checksum."""
    if not path.is_dir():
        raise UserError(f"checkpoint {path} does not exist; give a checkpoints/step-N folder or train.resume=auto")
    if not is_complete(path):
        raise CorruptCheckpoint(f"checkpoint {path} is incomplete (no {CHECKSUMS}: its save was interrupted); resume "
                                "from another checkpoints/step-N folder or use train.resume=auto")
    try:
        expected = json.loads((path / CHECKSUMS).read_text(encoding="utf-8"))["sha256"]
        names = [name for name in STATE_FILES if expected[name]]
    except (ValueError, KeyError, TypeError):
        raise CorruptCheckpoint(f"checkpoint {path}: {CHECKSUMS} is damaged; resume from another "
                                "checkpoints/step-N folder or use train.resume=auto") from None
    for name in names:
        file = path / name
        if not file.is_file() or file_sha256(file) != expected[name]:
            problem = "is missing" if not file.is_file() else "is damaged (its checksum differs from the one saved)"
            raise CorruptCheckpoint(f"checkpoint {path}: {name} {problem}; resume from another "
                                    "checkpoints/step-N folder or use train.resume=auto")


def complete_checkpoints(checkpoints_dir: Path, warn=None) -> list[Path]:
    """Complete step checkpoints, oldest first; incomplete ones are reported through `warn`."""
    found = []
    for folder in sorted(checkpoints_dir.glob("step-*"), key=_step_of):
        if is_complete(folder):
            found.append(folder)
        elif warn is not None:
            warn(f"warning: skipping incomplete checkpoint {folder}")
    return found


def newest_verified_checkpoint(checkpoints_dir: Path, warn) -> Path | None:
    """The newest checkpoint whose files all match their checksums; each one passed over is reported."""
    for folder in reversed(complete_checkpoints(checkpoints_dir, warn)):
        try:
            verify_checkpoint(folder)
            return folder
        except CorruptCheckpoint as exc:
            warn(f"warning: {exc.args[0].split(';')[0]}; trying the previous checkpoint")
    return None


def rotate_checkpoints(checkpoints_dir: Path, keep: int, protect_step: int | None) -> None:
    """Keep the newest `keep` complete checkpoints plus the best one (`protect_step`)."""
    complete = complete_checkpoints(checkpoints_dir)
    for stale in complete[:-keep]:
        if _step_of(stale) != protect_step:
            shutil.rmtree(stale)


def _step_of(folder: Path) -> int:
    try:
        return int(folder.name.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1
