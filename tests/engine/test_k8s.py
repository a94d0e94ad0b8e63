"""The Kubernetes recipes: the manifests parse and name files the image has; and the PaddleJob's container command,
run on two hosts (network namespaces joined by a veth pair) under the environment variables the Kubeflow training
operator injects (PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID: pkg/controller.v1/paddlepaddle/envvar.go), trains
one run whose two ranks end with identical weights."""
import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, tiny_run_args, write_splits, write_vocab
from netns import needs_root, two_hosts

MANIFESTS = ROOT / "docker" / "k8s"
IMAGE_PATHS = {"/opt/paddle_ft/tools": ROOT / "tools", "/opt/paddle_ft/configs": ROOT / "configs"}  # Dockerfile COPY


def documents(name: str) -> dict:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text(encoding="utf-8"))}


def worker_container() -> dict:
    return documents("paddlejob.yaml")["PaddleJob"]["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]


def test_the_manifests_parse_and_name_what_exists():
    job = documents("paddlejob.yaml")
    assert set(job) == {"ConfigMap", "PaddleJob"} and job["PaddleJob"]["apiVersion"] == "kubeflow.org/v1"
    spec = job["PaddleJob"]["spec"]["paddleReplicaSpecs"]["Worker"]
    container = worker_container()
    assert container["name"] == "paddle" and spec["replicas"] == 2  # the operator reads the port of "paddle"
    assert {p["name"] for p in container["ports"]} == {"master"}
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert mounted == {v["name"] for v in spec["template"]["spec"]["volumes"]}
    config = yaml.safe_load(job["ConfigMap"]["data"]["train.yaml"])
    assert config["output_dir"].startswith("/output/") and config["data"]["train"].startswith("/data/")
    assert "/config/train.yaml" in container["command"] and "train.resume=auto" in container["command"]
    for word in container["command"]:
        for image_path, checkout in IMAGE_PATHS.items():
            if word.startswith(image_path):
                assert (checkout / word[len(image_path) + 1:]).is_file(), word
    ray = documents("raycluster.yaml")["RayCluster"]
    assert ray["apiVersion"] == "ray.io/v1" and ray["spec"]["workerGroupSpecs"][0]["replicas"] >= 1
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    assert "COPY tools /opt/paddle_ft/tools" in dockerfile and "COPY configs /opt/paddle_ft/configs" in dockerfile


def test_a_stopped_worker_has_time_to_save_and_only_signals_restart_it():
    """Issue 67: with Kubernetes' 30 s grace the pod died with the launcher before the launcher's own 30 s for its
    workers' stop checkpoint; `OnFailure` restarted a failed worker alone (its peer blocked in an all-reduce) and a user
    error forever."""
    job = documents("paddlejob.yaml")["PaddleJob"]["spec"]
    worker = job["paddleReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "ExitCode" and job["runPolicy"]["backoffLimit"] == 3
    assert worker["template"]["spec"]["terminationGracePeriodSeconds"] > 30 + 30  # the launcher's 30 s, and more


def test_the_paddlejobs_pods_can_write_their_volume_and_their_own_logs_and_name_their_interface():
    """Issue 46: no fsGroup for the image's uid (a fresh volume is root's), both workers writing workerlog.0 on the
    shared volume, and no NCCL_SOCKET_IFNAME."""
    pod = documents("paddlejob.yaml")["PaddleJob"]["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]
    uid = int(re.search(r"useradd .*--uid (\d+)", (ROOT / "docker" / "Dockerfile").read_text()).group(1))
    assert pod["securityContext"] == {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid}
    container = worker_container()
    log_dir = container["command"][container["command"].index("--log_dir") + 1]
    env = {variable["name"]: variable for variable in container["env"]}
    variables = re.findall(r"\$\((\w+)\)", log_dir)
    assert log_dir.startswith("/output/") and variables == ["POD_NAME"]  # a folder per pod on the shared volume
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["NCCL_SOCKET_IFNAME"]["value"] == env["GLOO_SOCKET_IFNAME"]["value"] == "eth0"


@pytest.mark.slow
@pytest.mark.root
@needs_root
def test_the_paddlejob_command_trains_on_two_hosts_under_the_operators_variables(tmp_path):
    data = write_splits(tmp_path / "data", (240, 60, 60))
    # the tiny model on the test corpus instead of /data's encoder; the data, output and config are "mounted" by
    # putting this machine's paths where the manifest has /data, /output and /config
    tiny = [a for a in tiny_run_args(data, write_vocab(tmp_path / "vocab.txt"), tmp_path / "unused")
            if not a.startswith(("output_dir=", "data."))] + ["model.backbone=null", "train.max_steps=10",
                                                                "data.test=null", "data.max_length=64"]
    container = worker_container()
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "master")
    with two_hosts("10.213.9") as hosts:
        jobs = []
        for rank, (host, link, address) in enumerate(hosts):
            output = tmp_path / f"output-{rank}"  # each host its own disk: only rank 0 may write the run
            config = tmp_path / f"config-{rank}" / "train.yaml"
            config.parent.mkdir()
            config.write_text(documents("paddlejob.yaml")["ConfigMap"]["data"]["train.yaml"]
                              .replace("/output/", f"{output}/").replace("/data/", f"{data}/"), encoding="utf-8")
            command = [_in_checkout(word, config, output).replace("$(POD_NAME)", f"worker-{rank}")
                       for word in container["command"]]
            command[0] = sys.executable
            env = {**os.environ, "PYTHONUNBUFFERED": "0", "PADDLE_JOB_ID": "paddle-ft-train", "PADDLE_NNODES": "2",
                   # worker 0 is the rendezvous: its own pod IP for itself, its replica name for the others
                   "PADDLE_MASTER": f"{hosts[0][2]}:{port}",
                   "POD_IP": address, "GLOO_SOCKET_IFNAME": link}  # the manifest's env, with this host's values
            jobs.append(subprocess.Popen(["ip", "netns", "exec", host, "env", *[f"{k}={v}" for k, v in env.items()],
                                          *command, *[x for a in tiny for x in ("-o", a)]],
                                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [job.communicate(timeout=600)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    written = [rank for rank in (0, 1) if (tmp_path / f"output-{rank}" / "run" / "results.json").is_file()]
    assert len(written) == 1  # one rank wrote the run
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / f"output-{written[0]}" / "logs").glob("*/*"))
    assert "weights identical on all 2 ranks" in logs and re.search(r"plan: .* x 2 device\(s\)", logs)


def _in_checkout(word: str, config, output) -> str:
    """A word of the container's command with the image's paths made this machine's."""
    for image_path, checkout in IMAGE_PATHS.items():
        if word.startswith(image_path):
            return str(checkout / word[len(image_path) + 1:])
    return word.replace("/config/train.yaml", str(config)).replace("/output", str(output))
