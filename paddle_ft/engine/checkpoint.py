"""Checkpoints written atomically: a temporary folder, renamed into place when complete."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import paddle

TRAINER_STATE = "trainer_state.json"


@contextlib.contextmanager
def atomic_directory(final: Path):
    """Yield a temporary folder beside `final`; it replaces `final` only if the block finishes."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        tmp.rename(final)


def save_checkpoint(checkpoints_dir: Path, global_step: int, model, optimizer, scheduler,
                    trainer_state: dict) -> Path:
    final = checkpoints_dir / f"step-{global_step}"
    with atomic_directory(final) as tmp:
        paddle.save(model.state_dict(), str(tmp / "model_state.pdparams"))
        paddle.save(optimizer.state_dict(), str(tmp / "optimizer.pdopt"))
        paddle.save(scheduler.state_dict(), str(tmp / "scheduler.pdparams"))
        # written last: its presence marks the checkpoint complete
        (tmp / TRAINER_STATE).write_text(json.dumps({"global_step": global_step, **trainer_state}, indent=2))
    return final


def rotate_checkpoints(checkpoints_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` complete step checkpoints."""
    complete = sorted((d for d in checkpoints_dir.glob("step-*") if (d / TRAINER_STATE).is_file()),
                      key=lambda d: int(d.name.split("-")[1]))
    for stale in complete[:-keep]:
        shutil.rmtree(stale)
