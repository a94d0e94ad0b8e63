"""Exact resume, signals, divergence and checkpoint safety, on real training processes."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import pytest

from paddle_ft import runtime
from paddle_ft.cli import main
from paddle_ft.engine import checkpoint as ckpt
from paddle_ft.io import atomic_directory

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs" / "demo-scratch.yaml")


def args_for(tiny_config_args, out, *extra):
    # 240 examples / batch 8 = 30 micro-batches per epoch; dropout on, so RNG state matters
    items = [a for a in tiny_config_args if not a.startswith("output_dir=")]
    items += [f"output_dir={out}", "train.batch_size=8", "train.epochs=2", "train.runtime.log_every=1",
              "train.checkpoints.every=4", "model.dropout=0.1", "data.test=null", *extra]
    return [x for item in items for x in ("-o", item)]


def train_events(out):
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(e["step"], e["loss"], e["lr"]) for e in map(json.loads, lines) if e["event"] == "train"]


def final_weights(out):
    newest = ckpt.complete_checkpoints(out / "checkpoints")[-1]
    return newest.name, paddle.load(str(newest / "model_state.pdparams"))


def stop_with_sigterm(args, out, after_step: int) -> subprocess.CompletedProcess:
    """Start real training, SIGTERM it once it has logged `after_step`, and wait for it to exit."""
    process = subprocess.Popen([sys.executable, str(ROOT / "tools" / "train.py"), "--config", DEMO, *args],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if (out / "metrics.jsonl").is_file() and any(s >= after_step for s, _, _ in train_events(out)):
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    [], ["train.accumulate_steps=3"],
    pytest.param(["train.amp.enabled=true", "train.amp.dtype=bfloat16"], marks=pytest.mark.skipif(
        not runtime.cpu_supports_bf16(), reason="bfloat16 training on a CPU needs AVX512-BF16 or AMX"))],
    ids=["plain", "accumulation", "amp-bf16"])
def test_sigterm_then_resume_equals_the_uninterrupted_run(variant, tiny_config_args, tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, whole, *variant)]) == 0

    stopped = stop_with_sigterm(args_for(tiny_config_args, broken, *variant), broken, after_step=5)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "Traceback" not in stopped.stderr
    last_line = stopped.stderr.strip().splitlines()[-1]
    assert "stopped by signal 15 after step" in last_line
    command = last_line.split("Resume with: ")[1]
    assert command == f"python -m paddle_ft train --config {broken / 'config.yaml'} -o train.resume=auto"
    stopped_at = int(last_line.split("after step ")[1].split(";")[0])
    total_steps = train_events(whole)[-1][0]
    assert 5 <= stopped_at < total_steps  # stopped mid-run (mid-epoch unless it landed on a boundary)

    resumed = subprocess.run([sys.executable, *command.split()[1:]], cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {broken / 'checkpoints' / f'step-{stopped_at}'}" in resumed.stdout

    name_whole, weights_whole = final_weights(whole)
    name_broken, weights_broken = final_weights(broken)
    assert name_whole == name_broken
    for key, value in weights_whole.items():
        assert np.array_equal(value.numpy(), weights_broken[key].numpy()), key
    assert train_events(broken) == train_events(whole)  # same losses, same LR, no step logged twice


def test_resume_auto_skips_an_incomplete_checkpoint(tiny_config_args, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=8")]) == 0
    broken = out / "checkpoints" / "step-99"
    broken.mkdir()
    (broken / "model_state.pdparams").write_bytes(b"half-written")
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=10",
                                                       "train.resume=auto")]) == 0
    printed = capsys.readouterr().out
    assert f"warning: skipping incomplete checkpoint {broken}" in printed
    assert f"resumed from {out / 'checkpoints' / 'step-8'}" in printed


@pytest.mark.parametrize("resume, fragment", [("/nonexistent/step-3", "does not exist"),
                                              ("{out}/checkpoints/step-99", "is incomplete (no checksums.json")])
def test_resume_from_a_bad_path_is_a_config_error(resume, fragment, tiny_config_args, tmp_path, capsys):
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (elsewhere / "checkpoints" / "step-99").mkdir(parents=True)
    code = main(["train", "--config", DEMO, *args_for(tiny_config_args, out,
                                                       f"train.resume={resume.format(out=elsewhere)}")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: config key 'train.resume'") and fragment in err


def test_nan_loss_stops_with_the_step_and_last_good_checkpoint(tiny_config_args, tmp_path, capsys, monkeypatch):
    from paddle_ft.engine import trainer

    real = trainer._forward_backward
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        loss = real(*args, **kwargs)
        calls["n"] += 1
        return loss * float("nan") if calls["n"] > 6 else loss

    monkeypatch.setattr(trainer, "_forward_backward", poisoned)
    out = tmp_path / "run"
    code = main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_nonfinite_steps=3")])
    err = capsys.readouterr().err
    assert code == 2
    assert (f"the loss was NaN/inf for 3 steps in a row (steps 7-9); last good checkpoint: "
            f"{out / 'checkpoints' / 'step-8'}") in err
    step8 = paddle.load(str(out / "checkpoints" / "step-8" / "model_state.pdparams"))
    assert all(np.isfinite(v.numpy()).all() for v in step8.values())  # NaN steps never updated weights


def test_full_disk_is_refused_before_training(tiny_config_args, tmp_path, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    out = tmp_path / "run"
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {out} has 0 MiB free, but this run's checkpoints need about" in err
    assert not (out / "metrics.jsonl").exists()


def fake_checkpoint(folder: Path, complete=True):
    folder.mkdir(parents=True)
    for name in ckpt.STATE_FILES:
        (folder / name).write_text("x")
    if complete:
        (folder / ckpt.CHECKSUMS).write_text("{}")


def test_rotation_keeps_newest_and_best_and_ignores_incomplete(tmp_path):
    for step in (2, 4, 6, 8):
        fake_checkpoint(tmp_path / f"step-{step}")
    fake_checkpoint(tmp_path / "step-10", complete=False)
    ckpt.rotate_checkpoints(tmp_path, keep=1, protect_step=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-10", "step-4", "step-8"]
    ckpt.rotate_checkpoints(tmp_path, keep=1, protect_step=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-10", "step-8"]  # the only complete one stays


def test_a_crash_during_save_leaves_the_previous_checkpoint(tmp_path):
    fake_checkpoint(tmp_path / "step-2")
    with pytest.raises(OSError):
        with atomic_directory(tmp_path / "step-4") as tmp:
            (tmp / "model_state.pdparams").write_text("partial")
            raise OSError("No space left on device")
    assert [p.name for p in tmp_path.iterdir()] == ["step-2"]
    assert ckpt.complete_checkpoints(tmp_path) == [tmp_path / "step-2"]


def same_weights(a: Path, b: Path) -> bool:
    first, second = paddle.load(str(a / "model_state.pdparams")), paddle.load(str(b / "model_state.pdparams"))
    return first.keys() == second.keys() and all(np.array_equal(first[k].numpy(), second[k].numpy()) for k in first)


@pytest.mark.parametrize("damage", [
    lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]),  # truncated
    lambda f: f.write_bytes(bytes(f.stat().st_size)),  # zeroed
    lambda f: f.write_bytes(f.read_bytes()[:100] + b"garbage" + f.read_bytes()[107:]),  # garbled
], ids=["truncated", "zeroed", "garbled"])
def test_resume_auto_falls_back_past_a_damaged_checkpoint_and_ends_identical(damage, tiny_config_args, tmp_path,
                                                                              capsys):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    for out in (whole, broken):
        assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=8")]) == 0
    damage(broken / "checkpoints" / "step-8" / "model_state.pdparams")
    capsys.readouterr()
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, broken, "train.max_steps=8",
                                                       "train.resume=auto")]) == 0
    printed = capsys.readouterr().out
    assert (f"warning: checkpoint {broken / 'checkpoints' / 'step-8'}: model_state.pdparams is damaged (its checksum "
            "differs from the one saved); trying the previous checkpoint") in printed
    assert f"resumed from {broken / 'checkpoints' / 'step-4'}" in printed
    assert same_weights(whole / "checkpoints" / "step-8", broken / "checkpoints" / "step-8")
    assert same_weights(whole / "best", broken / "best")


def test_resume_from_a_damaged_path_names_the_file(tiny_config_args, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=4")]) == 0
    (out / "checkpoints" / "step-4" / "optimizer.pdopt").write_bytes(b"")
    code = main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=8",
                                                       f"train.resume={out / 'checkpoints' / 'step-4'}")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert (f"error: config key 'train.resume': checkpoint {out / 'checkpoints' / 'step-4'}: optimizer.pdopt "
            "is damaged") in err


@pytest.mark.parametrize("change, fragment", [
    ("model.scratch.num_layers=1", "config key 'model.scratch.num_layers': the run in {out} was started "
                                   "with 2, this resume asks for 1"),
    ("train.batch_size=4", "config key 'train.batch_size': the run in {out} was started with 8"),
    ("data.labels=[正面,负面]", "was trained with the labels ['负面', '正面'], this data has ['正面', '负面']"),
    # issue 27, root 4: what the model reads and answers is part of the run too
    ("data.truncation=tail", "config key 'data.truncation': the run in {out} was started with 'head', this resume "
                            "asks for 'tail'"),
    ("data.text_pair_column=text", "config key 'data.text_pair_column': the run in {out} was started with None"),
])
def test_a_resume_that_does_not_fit_the_run_is_refused_before_anything_is_rewritten(change, fragment,
                                                                                   tiny_config_args, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=4")]) == 0
    before = {name: (out / name).read_bytes() for name in ("config.yaml", "label_map.json", "metrics.jsonl")}
    capsys.readouterr()
    code = main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=8", "train.resume=auto",
                                                       change)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and fragment.format(out=out) in err, err
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_run_killed_mid_save_resumes_with_its_best_and_without_leftovers(tiny_config_args, tmp_path, capsys):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    for out in (whole, broken):
        assert main(["train", "--config", DEMO, *args_for(tiny_config_args, out, "train.max_steps=8")]) == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (broken / "best").rename(broken / f".best.old-{dead.pid}")  # killed between the two renames of best/
    (broken / "checkpoints" / f".step-12.tmp-{dead.pid}").mkdir()  # killed while writing a checkpoint
    assert main(["train", "--config", DEMO, *args_for(tiny_config_args, broken, "train.max_steps=8",
                                                       "train.resume=auto")]) == 0
    assert f"restored {broken / 'best'}" in capsys.readouterr().out
    assert sorted(p.name for p in broken.iterdir() if p.name.startswith(".")) == [".paddle_ft-lock", ".paddle_ft-owner"]
    assert sorted(p.name for p in (broken / "checkpoints").iterdir()) == ["step-4", "step-8"]
    assert same_weights(whole / "best", broken / "best")


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_with_130_and_no_traceback(tiny_config_args, tmp_path):
    out = tmp_path / "run"
    big = ["model.scratch.hidden_size=256", "model.scratch.num_layers=4", "model.scratch.num_heads=4",
           "model.scratch.intermediate_size=1024", "train.batch_size=32", "train.epochs=20"]
    process = subprocess.Popen([sys.executable, str(ROOT / "tools" / "train.py"), "--config", DEMO,
                                *args_for(tiny_config_args, out, *big)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not ((out / "metrics.jsonl").is_file() and train_events(out)):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    time.sleep(0.02)  # the first one waits for the end of the step; the second lands during it
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == ("interrupted again: stopped at once without saving; resume from the "
                                               "last complete checkpoint with -o train.resume=auto")


def test_a_damaged_feature_cache_entry_is_tokenised_again(tokenizer, tmp_path):
    from conftest import synthetic_rows

    from paddle_ft.data.cache import cache_key, cached_tokenize
    from paddle_ft.data.readers import Example

    examples = [Example(t, None, None, i) for i, (t, _) in enumerate(synthetic_rows(30))]
    fresh, hit = cached_tokenize(examples, tokenizer, 64, None, tmp_path)
    assert not hit
    entry = tmp_path / cache_key(examples, tokenizer, 64)
    (entry / "input_ids.npy").write_bytes((entry / "input_ids.npy").read_bytes()[:200])
    again, hit = cached_tokenize(examples, tokenizer, 64, None, tmp_path)
    assert not hit and all(np.array_equal(a, b) for a, b in zip(fresh.input_ids, again.input_ids))
    cached, hit = cached_tokenize(examples, tokenizer, 64, None, tmp_path)  # rewritten, so a hit again
    assert hit and all(np.array_equal(a, b) for a, b in zip(fresh.input_ids, cached.input_ids))
