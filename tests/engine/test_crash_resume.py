"""Crash injection: kill -9 a training process at seeded random writes of checkpoints and best/ (a torn
file, or a rename or delete that never happens), again during the resume, then prove that resume=auto
always ends bit-identical to the uninterrupted run: same best/, same last checkpoint, same logged losses."""
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest
from conftest import DEMO

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SEED = 9


def run(tiny_config_args, out: Path, kill_at: int, count_file: Path, *extra: str) -> int:
    items = [a for a in tiny_config_args if not a.startswith("output_dir=")]
    items += [f"output_dir={out}", "train.batch_size=8", "train.max_steps=12", "train.evaluation.every=3",
              "train.checkpoints.every=2", "train.checkpoints.keep=1", "train.runtime.log_every=1", "model.dropout=0.1",
              "data.test=null", *extra]
    command = ["train", "--config", DEMO, *[x for item in items for x in ("-o", item)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "tests")}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "crash_hook.py"), str(kill_at), str(count_file), "--",
                           *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, -signal.SIGKILL), done.stderr
    return done.returncode


def weights(folder: Path) -> dict:
    return {k: v.numpy() for k, v in paddle.load(str(folder / "model_state.pdparams")).items()}


def losses(out: Path) -> list:
    events = map(json.loads, (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines())
    return [(e["event"], e["step"], e.get("loss"), e.get("lr"), e.get("grad_norm"), e.get("accuracy"))
            for e in events if e["event"] in ("train", "eval")]


def assert_identical(a: Path, b: Path) -> None:
    for folder in ("best", "checkpoints/step-12"):
        first, second = weights(a / folder), weights(b / folder)
        assert first.keys() == second.keys()
        assert all(np.array_equal(first[k], second[k]) for k in first), folder
    assert losses(a) == losses(b)
    assert json.loads((a / "results.json").read_text()) == json.loads((b / "results.json").read_text())


# one seeded kill point among each kind of write a run makes
KINDS = {"best/ file": lambda op, path: "/.best.tmp-" in path and op != "rmtree",
         "best/ rename": lambda op, path: op == "rename" and "best" in path,
         "checkpoint file": lambda op, path: "/.step-" in path and op in ("paddle.save", "write_bytes", "write_text"),
         "checkpoint rename": lambda op, path: op == "rename" and "/.step-" in path,
         "rotation delete": lambda op, path: op == "rmtree" and "/checkpoints/step-" in path}


def writes_of(log: Path) -> list[tuple[int, str, str]]:
    return [(int(n), op, path) for n, op, path in (line.split(" ", 2) for line in log.read_text().splitlines())]


def test_kill_9_at_random_writes_then_resume_auto_ends_bit_identical(tiny_config_args, tmp_path):
    reference, log = tmp_path / "reference", tmp_path / "writes"
    assert run(tiny_config_args, reference, 0, log) == 0
    writes = writes_of(log)
    rng = random.Random(SEED)
    for kind, matches in KINDS.items():
        candidates = [n for n, op, path in writes if matches(op, path)]
        assert candidates, kind
        out, kill_at = tmp_path / kind.replace("/", "").replace(" ", "-"), rng.choice(candidates)
        log.unlink()
        assert run(tiny_config_args, out, kill_at, log) == -signal.SIGKILL
        assert writes_of(log)[-1][0] == kill_at
        # the resume is killed too, once, at a random write of its own (if it gets that far)
        run(tiny_config_args, out, rng.randint(1, len(writes)), log, "train.resume=auto")
        assert run(tiny_config_args, out, 0, log, "train.resume=auto") == 0
        assert_identical(reference, out)
        assert not [p for p in out.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name]
