"""Data parallel on CPU: real `paddle.distributed.launch` jobs of 2 gloo workers."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest
from conftest import synthetic_rows, write_tsv
from netns import needs_root, two_hosts

from paddle_ft.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs" / "demo-scratch.yaml")

pytestmark = pytest.mark.slow  # every test here starts processes


@pytest.fixture
def job_args(tiny_config_args, tmp_path):
    # 61 dev rows: the two ranks score 31 and 30, so "every example exactly once" is put to the test
    write_tsv(tmp_path / "data" / "dev.tsv", synthetic_rows(61, seed=2))
    keep = [a for a in tiny_config_args if not a.startswith(("output_dir=", "train.batch_size", "train.epochs"))]
    return keep + ["data.test=null", "model.dropout=0.0", "train.max_steps=10", "train.optimizer.learning_rate=1e-3",
                   "train.evaluation.every=5", "train.runtime.log_every=5"]


def launch(args: list[str], log_dir: Path, launcher=("--nproc_per_node", "2")):
    command = [sys.executable, "-m", "paddle.distributed.launch", *launcher, "--log_dir", str(log_dir),
               str(ROOT / "tools" / "train.py"), "--config", DEMO, *[x for a in args for x in ("-o", a)]]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def weights(out: Path, step: int) -> dict:
    return {k: v.numpy() for k, v in paddle.load(str(out / "checkpoints" / f"step-{step}" / "model_state.pdparams")).items()}


def evals(out: Path) -> dict:
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return {e["step"]: e for e in map(json.loads, lines) if e["event"] == "eval"}


def assert_matches_single_process(single: Path, multi: Path, log_dir: Path):
    log = (log_dir / "workerlog.0").read_text()
    assert "weights identical on all 2 ranks" in log
    assert "Modified FLAGS detected" not in log  # Paddle's banner on joining the group, hidden
    a, b = weights(single, 10), weights(multi, 10)
    assert max(float(np.abs(a[k] - b[k]).max()) for k in a) < 1e-5
    assert [e["examples"] for e in evals(multi).values()] == [61, 61]


@pytest.mark.parametrize("per_rank", [["train.batch_size=4"], ["train.batch_size=2", "train.accumulate_steps=2"]],
                         ids=["batch4x2ranks", "batch2xaccum2x2ranks"])
def test_two_gloo_workers_match_one_process_with_the_same_global_batch(per_rank, job_args, tmp_path, capsys):
    single, multi = tmp_path / "single", tmp_path / "multi"
    assert main(["train", "--config", DEMO, *[x for a in job_args + [f"output_dir={single}", "train.batch_size=8"]
                                              for x in ("-o", a)]]) == 0
    result = launch(job_args + [f"output_dir={multi}", *per_rank], tmp_path / "log")
    assert result.returncode == 0, (tmp_path / "log" / "workerlog.0").read_text()[-3000:]
    assert_matches_single_process(single, multi, tmp_path / "log")
    # only rank 0 writes: one metrics file, and the plan states the global batch
    plan = json.loads((multi / "metrics.jsonl").read_text().splitlines()[0])
    assert (plan["world_size"], plan["effective_batch_size"]) == (2, 8)
    # issue 67: resumed by one process, the run would go on with another batch, sampler and schedule
    before = (multi / "metrics.jsonl").read_bytes()
    assert main(["train", "--config", str(multi / "config.yaml"), "-o", "train.resume=auto"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: checkpoint {multi / 'checkpoints' / 'step-10'} was written by 2 process(es) and this run has 1: its "
        "batches, data order and schedule hold for 2 only; resume with 2 (python -m paddle.distributed.launch "
        "--nproc_per_node / --gpus), or start a new run in another output_dir")
    assert (multi / "metrics.jsonl").read_bytes() == before  # refused before anything of the run was rewritten


def test_distributed_dev_metrics_equal_a_single_process_evaluation(job_args, tmp_path):
    from paddle_ft.artifacts.bundle import load_bundle
    from paddle_ft.data.features import tokenize
    from paddle_ft.data.labels import LabelMap
    from paddle_ft.data.readers import Columns, read_examples
    from paddle_ft.engine.evaluate import evaluate

    multi = tmp_path / "multi"
    result = launch(job_args + [f"output_dir={multi}", "train.batch_size=4"], tmp_path / "log")
    assert result.returncode == 0, (tmp_path / "log" / "workerlog.0").read_text()[-3000:]
    bundle = load_bundle(multi / "best")
    model, tokenizer, labels = bundle.model, bundle.tokenizer, bundle.label_map
    assert labels == LabelMap.load(multi)
    dev, _ = read_examples(tmp_path / "data" / "dev.tsv", "tsv", Columns(), frozenset(labels.names))
    features = tokenize(dev, tokenizer, 64, labels)
    for step, logged in evals(multi).items():
        model.set_state_dict(paddle.load(str(multi / "checkpoints" / f"step-{step}" / "model_state.pdparams")))
        report, _ = evaluate(model, features, 64, tokenizer.pad_token_id, labels.names)
        assert {k: logged[k] for k in report} == report


def test_an_epoch_with_one_example_too_many_for_its_steps_trains_to_its_end(job_args, tmp_path):
    """41 rows in steps of 8 over 2 ranks: the 1-row partial step would have left one rank nothing to train on
    (a crash, mid-epoch with length-grouped batches); it sits this epoch out and every step the plan counts runs."""
    write_tsv(tmp_path / "data" / "train41.tsv", synthetic_rows(41, seed=4))
    multi = tmp_path / "multi"
    result = launch(job_args + [f"output_dir={multi}", f"data.train={tmp_path / 'data' / 'train41.tsv'}",
                                "train.batch_size=4", "train.max_steps=null", "train.epochs=2",
                                "train.evaluation.every=0"], tmp_path / "log")
    assert result.returncode == 0, (tmp_path / "log" / "workerlog.0").read_text()[-3000:]
    plan = json.loads((multi / "metrics.jsonl").read_text().splitlines()[0])
    assert (plan["steps_per_epoch"], plan["total_steps"]) == (5, 10)
    assert sorted(evals(multi)) == [5, 10]


def test_sigterm_to_the_launcher_stops_every_rank_and_the_resume_is_exact(job_args, tmp_path):
    import signal
    import time

    args = [a for a in job_args if not a.startswith("train.max_steps")] + [
        "train.epochs=2", "train.batch_size=2", "train.runtime.log_every=1", "model.dropout=0.1"]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert launch(args + [f"output_dir={whole}"], tmp_path / "log-whole").returncode == 0

    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
               str(tmp_path / "log-broken"), str(ROOT / "tools" / "train.py"), "--config", DEMO,
               *[x for a in args + [f"output_dir={broken}"] for x in ("-o", a)]]
    launcher = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = broken / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count('"train"') >= 5):
        time.sleep(0.05)
    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=300)
    logs = [(tmp_path / "log-broken" / f"workerlog.{r}").read_text() for r in (0, 1)]
    stops = [line for log in logs for line in log.splitlines() if line.startswith("stopped by signal 15 after step")]
    assert len(stops) == 2 and stops[0] == stops[1]  # both ranks stopped after the same step
    step = int(stops[0].split("after step ")[1].split(";")[0])
    assert (broken / "checkpoints" / f"step-{step}").is_dir()

    resumed = launch(args + [f"output_dir={broken}", "train.resume=auto"], tmp_path / "log-resumed")
    assert resumed.returncode == 0, (tmp_path / "log-resumed" / "workerlog.0").read_text()[-3000:]
    last = sorted((whole / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))[-1].name
    a = paddle.load(str(whole / "checkpoints" / last / "model_state.pdparams"))
    b = paddle.load(str(broken / "checkpoints" / last / "model_state.pdparams"))
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_a_rank_killed_by_sigkill_ends_the_job_and_train_resume_auto_finishes_it_exactly(job_args, tmp_path):
    """Issue 67 (the acceptance run's kill -9): a rank dies without a word (an OOM kill, a lost node); the launcher
    ends the other, nothing is saved, and `train.resume=auto` on the same number of processes goes on from the newest
    periodic checkpoint to the weights of an uninterrupted run."""
    import os
    import signal
    import time

    args = [a for a in job_args if not a.startswith("train.max_steps")] + [
        "train.epochs=2", "train.batch_size=2", "train.runtime.log_every=1", "model.dropout=0.1",
        "train.checkpoints.every=4", "train.checkpoints.keep=10"]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert launch(args + [f"output_dir={whole}"], tmp_path / "log-whole").returncode == 0
    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
               str(tmp_path / "log-broken"), str(ROOT / "tools" / "train.py"), "--config", DEMO,
               *[x for a in args + [f"output_dir={broken}"] for x in ("-o", a)]]
    launcher = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not (broken / "checkpoints" / "step-8").is_dir():
        time.sleep(0.05)
    workers = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, workers
    os.kill(int(workers[-1]), signal.SIGKILL)  # one rank, by the PID this test's launcher started
    assert launcher.wait(timeout=300) != 0
    saved = sorted(int(p.name.split("-")[1]) for p in (broken / "checkpoints").glob("step-*"))
    assert saved and saved[-1] < 20  # stopped mid-run, by the periodic checkpoints only

    resumed = launch(args + [f"output_dir={broken}", "train.resume=auto"], tmp_path / "log-resumed")
    assert resumed.returncode == 0, (tmp_path / "log-resumed" / "workerlog.0").read_text()[-3000:]
    assert f"resumed from {broken / 'checkpoints' / f'step-{saved[-1]}'}" in \
        (tmp_path / "log-resumed" / "workerlog.0").read_text()
    last = sorted((whole / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))[-1].name
    a = paddle.load(str(whole / "checkpoints" / last / "model_state.pdparams"))
    b = paddle.load(str(broken / "checkpoints" / last / "model_state.pdparams"))
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


@pytest.mark.root
@needs_root
def test_two_hosts_in_network_namespaces_match_one_process(job_args, tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    assert main(["train", "--config", DEMO, *[x for a in job_args + [f"output_dir={single}", "train.batch_size=8"]
                                              for x in ("-o", a)]]) == 0
    with two_hosts("10.213.7") as hosts:
        jobs = []
        for rank, (host, link, address) in enumerate(hosts):
            out = multi if rank == 0 else tmp_path / "multi-rank1"  # each host has its own disk
            launcher = ("--master", f"{hosts[0][2]}:29671", "--host", address, "--rank", str(rank), "--nnodes", "2",
                        "--nproc_per_node", "1")
            command = ["ip", "netns", "exec", host, "env", f"GLOO_SOCKET_IFNAME={link}", sys.executable, "-m",
                       "paddle.distributed.launch", *launcher, "--log_dir", str(tmp_path / f"log{rank}"),
                       str(ROOT / "tools" / "train.py"), "--config", DEMO,
                       *[x for a in job_args + [f"output_dir={out}", "train.batch_size=4"] for x in ("-o", a)]]
            jobs.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True))
        outputs = [job.communicate(timeout=600)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    assert_matches_single_process(single, multi, tmp_path / "log0")
    assert not (tmp_path / "multi-rank1" / "metrics.jsonl").exists()  # rank 1 wrote nothing
