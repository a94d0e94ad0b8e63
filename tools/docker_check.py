#!/usr/bin/env python3
"""make docker-check: build docker/Dockerfile with a real Docker engine and run the container commands of docs/serving.md in it.

No image registry is reachable where this runs, so the official Paddle image is replaced by a stand-in
(docker/standin.Dockerfile): Debian's own packages (debootstrap, then `docker import`), Paddle's CPU wheel as the
image's paddle, and pip pointed at a wheelhouse built on this host. The rootfs, the wheelhouse and both base images
are cached (CACHE below) and rebuilt only when their inputs change.

docs/serving.md's commands (COMMANDS) then run as it shows them, with two changes only: `--gpus all` is left out (no GPU
here), and the build names the stand-in (`--build-arg PADDLE_IMAGE=... --build-arg PADDLE_DEVICE=cpu`). Run as root,
they run as an unprivileged uid, so that "files written on the host belong to the host user" means something.
Checked: the build refuses a CPU base unless told; training and export in the container as that user on tiny data;
every file they write belongs to that user; the serving container becomes ready and healthy, answers exactly what
the export answers on the host, and `docker stop` drains it and it exits 0. Exit 0 when everything holds, else 1 with
one line saying what did not.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_IMAGE = "paddle_ft-check/debian:bookworm"
# the official image's libraries that Paddle's wheel needs and Debian's minimal base lacks
DEBIAN_PACKAGES = "python3,python3-venv,python3-pip,libgomp1"
PORT = 8080
# the container commands of docs/serving.md, as it shows them less `--gpus all` (test_packaging.py holds the two equal)
COMMANDS = {
    "build": "docker build -f docker/Dockerfile -t paddle_ft:serve .",
    "train": "docker run --shm-size=8g --user $(id -u):$(id -g) -v $PWD/data:/workspace/data:ro "
             "-v $PWD/out:/workspace/out -w /workspace paddle_ft:serve python /opt/paddle_ft/tools/train.py "
             "--config /opt/paddle_ft/configs/demo-scratch.yaml -o output_dir=out/demo",
    "export": "docker run --user $(id -u):$(id -g) -v $PWD/out:/workspace/out -w /workspace paddle_ft:serve "
              "python /opt/paddle_ft/tools/export.py --model out/demo/best --output out/demo/export",
    "serve": "docker run -p 8080:8080 -e DEVICE=cpu -v $PWD/out/demo/export:/export:ro paddle_ft:serve",
}
IMAGE = "paddle_ft:serve"  # the tag COMMANDS["build"] gives
GPU_FLAG = "--gpus all"
# a uid and gid that exist nowhere: the host user the commands run as when this runs as root
CHECK_UID = 4242
# a fresh build: the Debian and stand-in images (2 GB) and the served one (0.9 GB of its own), with room to spare
FREE_SPACE_GB = 4


class CheckFailed(Exception):
    """One line saying what did not hold."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache(),
                        help="rootfs, wheelhouse (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the working folder (kept anyway on failure)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="paddle_ft-docker-check-"))
    steps: list[tuple[str, float]] = []
    containers_before = container_ids()
    try:
        run_checks(args.cache, work, steps)
    except CheckFailed as failure:
        print_steps(steps)
        print(f"error: docker-check: {failure} (working folder kept: {work})", file=sys.stderr)
        return 1
    finally:
        remove_containers(container_ids() - containers_before)
    print_steps(steps)
    print(f"docker-check passed in {sum(s for _, s in steps):.0f} s: the container commands of docs/serving.md work as shown")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def print_steps(steps: list[tuple[str, float]]) -> None:
    for name, seconds in steps:
        print(f"  {seconds:7.1f} s  {name}", flush=True)


def default_cache() -> Path:
    override = os.environ.get("PADDLE_FT_DOCKER_CACHE")
    if override:
        return Path(override)
    return Path("/var/cache/paddle_ft/docker-check") if os.geteuid() == 0 else Path.home() / ".cache/paddle_ft/docker-check"


def run_checks(cache: Path, work: Path, steps: list[tuple[str, float]]) -> None:
    def step(name, action, *args):
        started = time.monotonic()
        result = action(*args)
        steps.append((name, time.monotonic() - started))
        return result

    docker_root = step("a Docker engine answers", require_docker)
    step(f"{FREE_SPACE_GB} GB free where Docker keeps images", require_free_space, docker_root)
    cache.mkdir(parents=True, exist_ok=True)
    step("Debian base image (debootstrap, cached)", debian_image, cache)
    wheelhouse = step("wheelhouse for the stand-in's Python (cached)", build_wheelhouse, cache)
    base = step("stand-in Paddle image (cached)", standin_image, wheelhouse)
    step("the build refuses a CPU base unless PADDLE_DEVICE=cpu", refuses_cpu_base_by_default, base)
    replaced = image_id(IMAGE)
    step(COMMANDS["build"], run_command, COMMANDS["build"] + f" --build-arg PADDLE_IMAGE={base} "
         "--build-arg PADDLE_DEVICE=cpu", ROOT, None)
    remove_if_untagged(replaced)
    user = prepare_workspace(work)
    step(COMMANDS["train"], run_command, COMMANDS["train"], work, user)
    step(COMMANDS["export"], run_command, COMMANDS["export"], work, user)
    step("every file written belongs to the host user", files_belong_to, work / "out", user)
    step(COMMANDS["serve"] + " (ready, healthy, answers, drains)", serve_and_stop, work, user)


# --- what the build stands on -----------------------------------------------------------------------------------

def require_docker() -> Path:
    """The engine's data root (where its images are kept), once it answers."""
    if shutil.which("docker") is None:
        raise CheckFailed("no docker command: apt-get install -y docker.io, then start dockerd as root")
    answer = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True)
    if answer.returncode != 0:
        raise CheckFailed("no Docker engine answers (docker info failed): start it as root with `dockerd &`")
    return Path(answer.stdout.strip())


def require_free_space(folder: Path) -> None:
    """A full disk fails a build midway with pip's or the kernel's message, far from its cause: said first instead.
    An engine on another machine (DOCKER_HOST) keeps its images out of reach: its disk is not measured from here."""
    if not folder.is_dir():
        return
    free_gb = shutil.disk_usage(folder).free / 1e9
    if free_gb < FREE_SPACE_GB:
        raise CheckFailed(f"{free_gb:.1f} GB free in {folder}; the check's images need {FREE_SPACE_GB} GB: free space "
                          f"(docker image prune, old out/ folders) and run it again")


def image_exists(name: str) -> bool:
    return image_id(name) is not None


def image_id(name: str) -> str | None:
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def container_ids() -> set[str]:
    return set(subprocess.run(["docker", "ps", "--all", "--quiet", "--no-trunc"], capture_output=True,
                              text=True).stdout.split())


def remove_containers(created: set[str]) -> None:
    """The stopped containers this check's commands left (the documented `docker run`s have no --rm): those made
    while it ran, from the image it built; anything running is left alone."""
    ours = image_id(IMAGE)
    for container in created:
        state = subprocess.run(["docker", "inspect", "--format", "{{.Image}} {{.State.Running}}", container],
                               capture_output=True, text=True).stdout.split()
        if state == [ours, "false"]:
            subprocess.run(["docker", "rm", container], capture_output=True)


def remove_if_untagged(old: str | None) -> None:
    """The image an earlier check built as IMAGE, once the new build has taken its tag: each rebuild of a changed
    checkout left ~1 GB of untagged layers behind. Kept where it still has a tag or a container uses it."""
    if old is None or old == image_id(IMAGE):  # nothing built before, or the build changed nothing
        return
    tags = subprocess.run(["docker", "image", "inspect", "--format", "{{len .RepoTags}}", old], capture_output=True,
                          text=True)
    if tags.returncode == 0 and tags.stdout.strip() == "0":
        subprocess.run(["docker", "image", "rm", old], capture_output=True)  # refused while a container uses it


def debian_image(cache: Path) -> None:
    rootfs = cache / "rootfs-bookworm"
    if not image_exists(DEBIAN_IMAGE):
        if not (rootfs / ".complete").exists():
            if os.geteuid() != 0 or shutil.which("debootstrap") is None:
                raise CheckFailed("the Debian base image is missing and making it needs root and debootstrap "
                                  "(apt-get install -y debootstrap)")
            shutil.rmtree(rootfs, ignore_errors=True)
            checked(["debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}", "bookworm", str(rootfs),
                     debian_mirror()], "debootstrap")
            (rootfs / ".complete").touch()
        checked(["sh", "-c", f"tar -C {rootfs} --exclude=./.complete -c . | docker import - {DEBIAN_IMAGE}"],
                "docker import")


def debian_mirror() -> str:
    """The mirror this machine's apt uses (the network reaches only package indexes)."""
    for source in sorted(Path("/etc/apt").glob("sources.list*")) + sorted(Path("/etc/apt").glob("sources.list.d/*")):
        if source.is_file():
            found = re.search(r"(?:URIs:\s*|deb\s+)(https?://\S+/debian)\b(?!-security)", source.read_text())
            if found:
                return found.group(1)
    return "http://deb.debian.org/debian"


def paddle_version() -> str:
    found = re.search(r'"paddlepaddle==([0-9.]+)"', (ROOT / "setup.py").read_text())
    if found is None:
        raise CheckFailed("setup.py's cpu extra pins no paddlepaddle==X: the stand-in needs that version")
    return found.group(1)


def build_wheelhouse(cache: Path) -> Path:
    """paddle_ft's dependencies, Paddle's CPU wheel and the build backend, as wheels for the stand-in's Python."""
    if sys.version_info[:2] != (3, 11):
        raise CheckFailed(f"the wheelhouse is for Debian bookworm's Python 3.11 and this is "
                          f"{sys.version_info[0]}.{sys.version_info[1]}: run this with a Python 3.11")
    key = hashlib.sha256((ROOT / "setup.py").read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()[:12]
    wheelhouse = cache / f"wheelhouse-{key}"
    if not (wheelhouse / ".complete").exists():
        partial = cache / f"wheelhouse-{key}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        checked([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(partial), f"{ROOT}[cpu]",
                 "setuptools>=64", "wheel"], "pip wheel")
        for own in partial.glob("paddle_ft-*.whl"):  # the image builds its own from the checkout
            own.unlink()
        (partial / ".complete").touch()
        shutil.rmtree(wheelhouse, ignore_errors=True)
        partial.rename(wheelhouse)
    return wheelhouse


def standin_image(wheelhouse: Path) -> str:
    name = f"paddle_ft-check/paddle:{paddle_version()}-cpu-{wheelhouse.name.split('-')[-1]}"
    if not image_exists(name):
        checked(["docker", "build", "--quiet", "-f", str(ROOT / "docker/standin.Dockerfile"),
                 "--build-arg", f"DEBIAN_IMAGE={DEBIAN_IMAGE}", "--build-arg", f"PADDLE_VERSION={paddle_version()}",
                 "-t", name, str(wheelhouse)], "building the stand-in image")
    return name


def refuses_cpu_base_by_default(base: str) -> None:
    """Without PADDLE_DEVICE=cpu the build must stop at the CUDA check, saying which argument to set."""
    # --force-rm: the failing step's container is removed too, not left behind
    done = subprocess.run(["docker", "build", "--force-rm", "-f", "docker/Dockerfile", "--build-arg",
                           f"PADDLE_IMAGE={base}", "-t", "paddle_ft-check/refused", "."], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode == 0 or "PADDLE_DEVICE=cpu" not in done.stdout + done.stderr:
        raise CheckFailed("docker/Dockerfile built on a CPU paddle without PADDLE_DEVICE=cpu, or failed without "
                          "naming it: " + failure_output(done))


# --- the documented commands ------------------------------------------------------------------------------------------

def prepare_workspace(work: Path) -> tuple[int, int] | None:
    """data/demo as configs/demo-scratch.yaml reads it (tiny), and out/; owned by the user the commands run as."""
    write_tiny_demo_data(work / "data" / "demo")
    (work / "out").mkdir()
    if os.geteuid() != 0:
        return None
    for path in [work, *work.rglob("*")]:
        os.chown(path, CHECK_UID, CHECK_UID)
    return CHECK_UID, docker_socket_group()


def docker_socket_group() -> int:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return os.stat(host.removeprefix("unix://")).st_gid if host.startswith("unix://") else 0


POSITIVE = ["很好", "满意", "喜欢", "推荐", "不错", "很棒"]
NEGATIVE = ["太差", "失望", "讨厌", "后悔", "糟糕", "很烂"]
FILLER = ["这家店", "东西", "服务", "物流", "质量", "价格", "味道", "我觉得", "真的", "总体"]


def tiny_review(rng: random.Random, words: list[str]) -> str:
    return "".join(rng.sample(FILLER, 2)) + rng.choice(words) + rng.choice(FILLER)


def write_tiny_demo_data(folder: Path) -> None:
    """Reviews whose label is said by one word: the recipe's 2-layer model learns them in its 3 epochs of 50 steps."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for split, size in {"train": 1600, "dev": 64, "test": 64}.items():
        rows = [(tiny_review(rng, POSITIVE), "正面") if i % 2 else (tiny_review(rng, NEGATIVE), "负面")
                for i in range(size)]
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows),
                                             encoding="utf-8")
    characters = sorted(set("".join(POSITIVE + NEGATIVE + FILLER)))
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters]) + "\n",
                                      encoding="utf-8")


def as_user(user: tuple[int, int] | None, command: str) -> list[str]:
    if user is None:
        return ["bash", "-c", command]
    uid, docker_group = user
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={docker_group}", "bash", "-c", command]


def user_environment(work: Path) -> dict[str, str]:
    # the docker client keeps its config under ~; the unprivileged user's home is the working folder
    return {**os.environ, "HOME": str(work), "PWD": str(work)}


def run_command(command: str, cwd: Path, user: tuple[int, int] | None) -> None:
    done = subprocess.run(as_user(user, command), cwd=cwd, env=user_environment(cwd), capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckFailed(f"`{command}` exited {done.returncode}: {failure_output(done)}")


def files_belong_to(folder: Path, user: tuple[int, int] | None) -> None:
    uid = os.geteuid() if user is None else user[0]
    written = list(folder.rglob("*"))
    if not any(p.name == "model.json" or p.suffix == ".pdmodel" for p in written):
        raise CheckFailed(f"the export command left no exported program under {folder}")
    foreign = [p for p in written if p.lstat().st_uid != uid]
    if foreign:
        raise CheckFailed(f"{len(foreign)} files under out/ belong to uid {foreign[0].lstat().st_uid}, not the host "
                          f"user {uid}, e.g. {foreign[0]}")


def serve_and_stop(work: Path, user: tuple[int, int] | None) -> None:
    if subprocess.run(["docker", "ps", "-q", "--filter", f"publish={PORT}"], capture_output=True,
                      text=True).stdout.strip():
        raise CheckFailed(f"port {PORT} is taken by a running container: stop it (docker ps)")
    log = open(work / "serve.log", "w")
    server = subprocess.Popen(as_user(user, COMMANDS["serve"]), cwd=work, env=user_environment(work), stdout=log,
                              stderr=subprocess.STDOUT)
    container = None
    try:
        container = wait_until_ready(server, work / "serve.log")
        expected = host_answers(work / "out" / "demo" / "export", TEXTS)
        answered = classify(TEXTS)
        compare_answers(answered, expected)
        wait_until_healthy(container)
        checked(["docker", "stop", container], "docker stop")
        code = server.wait(timeout=60)
        state = json.loads(checked(["docker", "inspect", "--format", "{{json .State}}", container], "docker inspect"))
        if code != 0 or state["ExitCode"] != 0:
            raise CheckFailed(f"after docker stop the server exited {state['ExitCode']} (docker run: {code}): "
                              + tail((work / "serve.log").read_text()))
    finally:
        if server.poll() is None:
            server.kill()
        if container:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        log.close()


TEXTS = ["这家店东西很好物流", "服务质量太差味道", "我觉得价格满意总体"]


def wait_until_ready(server: subprocess.Popen, log: Path, seconds: float = 180) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CheckFailed(f"the serving container exited {server.returncode} before it was ready: "
                              + tail(log.read_text()))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return checked(["docker", "ps", "-q", "--filter", f"publish={PORT}"], "docker ps").strip()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    raise CheckFailed(f"/readyz did not answer 200 within {seconds:.0f} s: " + tail(log.read_text()))


def wait_until_healthy(container: str, seconds: float = 90) -> None:
    """The image's HEALTHCHECK asks /readyz every 15 s: a ready server must show as healthy."""
    deadline = time.monotonic() + seconds
    status = ""
    while time.monotonic() < deadline:
        status = checked(["docker", "inspect", "--format", "{{.State.Health.Status}}", container], "inspect").strip()
        if status == "healthy":
            return
        time.sleep(2)
    raise CheckFailed(f"the serving container is ready but its HEALTHCHECK says '{status}' after {seconds:.0f} s")


def classify(texts: list[str]) -> list[dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/classify", json.dumps({"texts": texts}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["results"]


def host_answers(export: Path, texts: list[str]) -> list[dict]:
    """The same export on this host, through paddle_ft's own predictor (the suite's environment)."""
    code = ("import json, sys; from paddle_ft import Classifier; c = Classifier(sys.argv[1]); "
            "print(json.dumps([{'label': a['label'], 'probabilities': a['probabilities']} "
            "for a in c(json.loads(sys.argv[2]))]))")
    python = ROOT / ".venv" / "bin" / "python"
    done = subprocess.run([str(python if python.exists() else sys.executable), "-c", code, str(export),
                           json.dumps(texts)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckFailed("the export does not load on the host: " + tail(done.stderr))
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_answers(answered: list[dict], expected: list[dict]) -> None:
    for text, got, want in zip(TEXTS, answered, expected):
        if got["label"] != want["label"]:
            raise CheckFailed(f"the container answers '{got['label']}' for {text!r}, the export on the host "
                              f"'{want['label']}'")
        gap = max(abs(got["probabilities"][k] - want["probabilities"][k]) for k in want["probabilities"])
        if gap > 1e-5:
            raise CheckFailed(f"the container's probabilities for {text!r} differ from the host's by {gap:.2e}")
    if [a["label"] for a in answered] != ["正面", "负面", "正面"]:
        raise CheckFailed(f"the model trained in the container answers {[a['label'] for a in answered]} for "
                          f"{TEXTS}: it did not learn the tiny data")


# --- helpers ----------------------------------------------------------------------------------------------------

def checked(command: list[str], what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckFailed(f"{what} failed ({done.returncode}): {failure_output(done)}")
    return done.stdout


def failure_output(done: subprocess.CompletedProcess) -> str:
    """The failing step's own last lines, then the command's error: the legacy builder prints a RUN step's output on
    stdout and only its verdict on stderr, so the last lines of both together hid why pip failed."""
    return f"{tail(done.stdout, 5)} | {tail(done.stderr, 2)}"


def tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


if __name__ == "__main__":
    sys.exit(main())
