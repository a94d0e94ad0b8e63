"""predict --ray on a local two-node Ray cluster (two raylets on loopback): the same answers as single-process
predict over 20,000 texts in 8 files; a run killed mid-way, or one whose scoring worker is killed, completes on a
rerun that scores only the shards not yet written.

Ray 2.60's GCS server and raylets listen on every interface whatever --node-ip-address says (seen here with `ss
-ltnp`: `*:port`, and its runtime-env agent on the machine's external address), so the cluster and the commands that
use it run in a network namespace of their own that holds only a loopback interface: nothing of the test can be
reached from the machine's network."""
import contextlib
import json
import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import export_tiny_model, synthetic_rows, write_tsv
from netns import needs_root

from paddle_ft.cli import main

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, needs_root]  # a Ray cluster, and 20,000 texts scored three times
ROOT = Path(__file__).resolve().parents[2]
# Ray 2.5x turns token authentication on by default; the two nodes here are one machine's loopback
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Cluster:
    address: str
    folders: tuple[Path, ...]
    namespace: str
    """The network namespace (loopback only) the nodes and the commands that use them run in."""

    def command(self, *args) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *map(str, args)]


@contextlib.contextmanager
def loopback_only_namespace():
    name = f"pftray{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def cluster():
    """Two raylets on loopback, each with a temporary folder of its own: what the test started is found by that
    folder (and the processes under it), never by name, so a Ray cluster of the user's own is left alone."""
    ray = [str(Path(sys.executable).with_name("ray"))]
    address = f"127.0.0.1:{free_port()}"
    # short paths of our own: Ray's unix sockets live under them, and a socket path has at most 107 bytes
    head, worker = (Path(tempfile.mkdtemp(prefix=f"pft-ray-{role}-")) for role in ("head", "worker"))
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    with loopback_only_namespace() as namespace:
        cluster = Cluster(address, (head, worker), namespace)
        try:
            subprocess.run(cluster.command(*ray, "start", "--head", f"--port={address.split(':')[1]}",
                                           "--include-dashboard=false", f"--temp-dir={head}", *common), env=ENV,
                           check=True, capture_output=True, timeout=120)
            subprocess.run(cluster.command(*ray, "start", f"--address={address}", f"--temp-dir={worker}", *common),
                           env=ENV, check=True, capture_output=True, timeout=120)
            yield cluster
        finally:
            end_processes_of(head, worker)
            for folder in (head, worker):
                shutil.rmtree(folder, ignore_errors=True)


def processes() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, command line)} of every process this user can see."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
            found[int(entry.name)] = (parent, command)
    return found


def started_under(*folders: Path) -> set[int]:
    """The processes whose command line names one of `folders`, and every process below them (Ray renames its
    workers, "ray::ShardScorer", so those are found as the raylet's children)."""
    table = processes()
    ours = {pid for pid, (_, command) in table.items() if any(str(folder) in command for folder in folders)}
    while True:
        below = {pid for pid, (parent, _) in table.items() if parent in ours} - ours
        if not below:
            return ours
        ours |= below


def end_processes_of(*folders: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in started_under(*folders):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while started_under(*folders) and time.monotonic() < deadline:
            time.sleep(0.2)


def predict_on_ray(export, inputs, output, cluster: Cluster, *extra) -> subprocess.Popen:
    command = cluster.command(sys.executable, "-m", "paddle_ft", "predict", "--export", export, "--input", inputs,
                              "--output", output, "--ray", cluster.address, "--shard-rows", "1000", "--threads", "1",
                              *extra)
    return subprocess.Popen(command, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def settled(folder: Path) -> int:
    """How many shard files `folder` holds once that number has not changed for 3 s."""
    count, since = -1, time.monotonic()
    while time.monotonic() - since < 3:
        now = len(list(folder.glob("*.jsonl")))
        if now != count:
            count, since = now, time.monotonic()
        time.sleep(0.1)
    return count


def test_the_nodes_run_apart_from_the_machines_network(cluster):
    """Issue 43, root 10: what Ray listens on is reachable from the namespace's loopback alone."""
    ours = started_under(*cluster.folders)
    networks = {os.readlink(f"/proc/{pid}/ns/net") for pid in ours}
    assert len(ours) >= 4 and networks == {f"net:[{os.stat(f'/run/netns/{cluster.namespace}').st_ino}]"}
    assert os.readlink("/proc/self/ns/net") not in networks


def test_two_nodes_answer_as_one_process_and_a_killed_run_resumes(cluster, tmp_path, capsys):
    export = export_tiny_model(tmp_path / "model")
    inputs = tmp_path / "in"
    inputs.mkdir()
    files = [write_tsv(inputs / f"part-{i}.tsv", synthetic_rows(2500, seed=100 + i)) for i in range(8)]
    alone = []
    for path in files:  # single-process predict, file by file
        assert main(["predict", "--export", str(export), "--input", str(path), "--output-file", str(tmp_path / "one.jsonl"),
                     "--threads", "1", "--overwrite"]) == 0
        alone += [{"source": str(path), **json.loads(line)} for line in (tmp_path / "one.jsonl").read_text(
            encoding="utf-8").splitlines()]
    assert len(alone) == 20_000

    output = tmp_path / "out"
    first = predict_on_ray(export, inputs / "*.tsv", output, cluster)
    deadline = time.monotonic() + 300
    while len(list((output / "shards").glob("*.jsonl"))) < 4 and first.poll() is None:
        assert time.monotonic() < deadline, "no shard written in 5 minutes"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # the whole run, mid-way
    first.wait()
    written = settled(output / "shards")  # the dead run's actors may finish the shard in their hands
    assert 4 <= written < 24, written  # 24 shards in all: 1,000 + 1,000 + 500 texts of each file

    second = predict_on_ray(export, inputs / "*.tsv", output, cluster, "--merge")
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert f"24 shards of 20000 texts; {written} already written, {24 - written} to score" in out
    assert f"scored {24 - written} shards" in out and "2 actors on 2 node(s)" in out
    merged = [json.loads(line) for line in (output / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["source"], r["line"], r["text"], r["label"]) for r in merged] == \
        [(r["source"], r["line"], r["text"], r["label"]) for r in alone]
    # each process's backend auto may run a batch on another engine (logits within ~2e-7)
    assert max(abs(a["score"] - b["score"]) for a, b in zip(merged, alone)) <= 1e-6
    manifest = json.loads((output / "shards.json").read_text(encoding="utf-8"))
    assert manifest["rows"] == 20_000 and len(manifest["shards"]) == 24
    assert manifest["scored_by_the_last_run"] == 24 - written

    # one worker killed mid-run (a scoring actor's process): the run finishes or stops, and a rerun completes it
    # with the same answers, scoring only what was missing (two of the files: 6 shards)
    output = tmp_path / "out-worker-killed"
    run = predict_on_ray(export, inputs / "part-[01].tsv", output, cluster)
    while len(list((output / "shards").glob("*.jsonl"))) < 3 and run.poll() is None:
        time.sleep(0.05)
    ours = started_under(*cluster.folders)
    actors = [pid for pid, (_, command) in processes().items() if pid in ours and "ShardScorer" in command]
    assert actors, "no scoring actor found to kill"
    os.kill(actors[0], signal.SIGKILL)
    run.communicate(timeout=600)
    present = settled(output / "shards")
    rerun = predict_on_ray(export, inputs / "part-[01].tsv", output, cluster, "--merge")
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert f"{present} already written, {6 - present} to score" in out
    again = [json.loads(line) for line in (output / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["source"], r["line"], r["text"], r["label"]) for r in again] == \
        [(r["source"], r["line"], r["text"], r["label"]) for r in merged[:5_000]]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(again, merged)) <= 1e-6 + 1e-12  # as above
