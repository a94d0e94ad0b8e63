"""What can be checked of the container and the package without a Docker engine."""
import fnmatch
import re
import runpy
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]


def setup_kwargs() -> dict:
    with mock.patch("setuptools.setup") as setup:
        runpy.run_path(str(ROOT / "setup.py"))
    return setup.call_args.kwargs


def test_paddle_is_only_an_extra():
    kwargs = setup_kwargs()
    assert not [r for r in kwargs["install_requires"] if r.lower().startswith("paddlepaddle")]
    assert kwargs["extras_require"]["cpu"] == ["paddlepaddle==3.3.1"]
    assert kwargs["extras_require"]["gpu"][0].startswith("paddlepaddle-gpu")


def test_no_extra_resolves_to_a_paddle_older_than_the_one_tested():
    """Issue 46: `.[gpu]` said paddlepaddle-gpu>=2.6, which PyPI resolves to 2.6.2 (3.x GPU wheels are only on
    Paddle's own index); paddle_ft needs Paddle 3."""
    from packaging.requirements import Requirement

    tested = Requirement(setup_kwargs()["extras_require"]["cpu"][0]).specifier
    for extra, requirements in setup_kwargs()["extras_require"].items():
        for requirement in map(Requirement, requirements):
            if requirement.name.startswith("paddlepaddle"):
                assert "2.6.2" not in requirement.specifier and requirement.specifier == tested, (extra, requirement)
    setup_text = (ROOT / "setup.py").read_text()
    assert "https://www.paddlepaddle.org.cn/packages/stable/cu126/" in setup_text
    assert "paddlepaddle.org.cn/packages/stable/cu126/" in (ROOT / "docs" / "commands.md").read_text()


def test_the_images_paddle_is_the_paddle_the_tests_run_on():
    """Issue 46: the Dockerfile's base was Paddle 3.3.0 while 3.3.1 is what is tested."""
    base = re.search(r"^ARG PADDLE_IMAGE=\S+:(\d+\.\d+\.\d+)-gpu", (ROOT / "docker" / "Dockerfile").read_text(),
                     re.M).group(1)
    assert f"paddlepaddle=={base}" == setup_kwargs()["extras_require"]["cpu"][0]


def test_dockerfile_builds_on_the_paddle_gpu_image_without_a_second_paddle():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    base = re.search(r"^ARG PADDLE_IMAGE=(\S+)$", text, re.M).group(1)
    assert re.fullmatch(r"paddlepaddle/paddle:3\.\d+\.\d+-gpu-cuda12\.\d+-cudnn9\.\d+(-trt[\d.]+)?", base)
    assert re.search(r"^FROM \$\{PADDLE_IMAGE\}$", text, re.M)
    installs = re.findall(r"pip install[^\n\\&]*", text)
    assert installs, "no pip install line"
    for line in installs:
        assert "paddlepaddle" not in line and "[" not in line, line
    assert "is_compiled_with_cuda()" in text
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        sources = [word for word in line.split()[:-1] if not word.startswith("--")]
        if "--from=" not in line:
            assert all((ROOT / source).exists() for source in sources), line


def _final_stage(text: str) -> str:
    return text[[m.start() for m in re.finditer(r"^FROM ", text, re.M)][-1]:]


def test_dockerfile_serves_as_a_non_root_user_with_a_readiness_healthcheck():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    final = _final_stage(text)
    users = re.findall(r"^USER (\S+)$", final, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(rf"useradd .*{users[-1]}", final)
    health = re.search(r"^HEALTHCHECK .*\n(?:.*\n)*?\s*CMD (.+)$", final, re.M)
    assert health and "/readyz" in health.group(1)  # healthy = ready: a model that never loads is unhealthy
    assert re.search(r'^ENTRYPOINT \["/usr/local/bin/paddle_ft-serve"\]$', final, re.M)
    assert "docker/entrypoint.sh /usr/local/bin/paddle_ft-serve" in final
    assert re.search(r"^ENV EXPORT_DIR=/export PORT=8080", final, re.M) and re.search(r"^EXPOSE 8080$", final, re.M)
    # build tools stay in the build stage: the final stage installs only the wheel built there
    assert "COPY --from=build /wheels /wheels" in final and "pip wheel" not in final
    assert not re.search(r"apt-get install|build-essential|gcc|setup.py", final)


@pytest.mark.parametrize("home", ["/", "", "/proc/no-such-home"])
def test_the_entrypoint_gives_an_arbitrary_uid_a_writable_home(home, tmp_path):
    """Issue 28: `docker run --user $(id -u):$(id -g)` gives HOME=/, and `import paddlenlp` then fails creating
    /.paddlenlp. The entrypoint runs a command (anything not starting with "-") with a home it can write."""
    import os
    import subprocess

    env = {**os.environ, "HOME": home, "TMPDIR": str(tmp_path)}
    done = subprocess.run([str(ROOT / "docker" / "entrypoint.sh"), "sh", "-c", 'echo "$HOME"; touch "$HOME/x"'],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path}/paddle_ft-home-{os.getuid()}" and (tmp_path / done.stdout.strip() /
                                                                                    "x").is_file()
    kept = subprocess.run([str(ROOT / "docker" / "entrypoint.sh"), "sh", "-c", 'echo "$HOME"'],
                          env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True)
    assert kept.stdout.strip() == str(tmp_path)  # a home that can be written is kept


def _docker_check():
    return runpy.run_path(str(ROOT / "tools" / "docker_check.py"))


def _device_free(command: str) -> str:
    """A container command less what picks the device: README shows the GPU form, docker-check runs the CPU one."""
    return " ".join(command.replace("--gpus all ", "").replace("-e DEVICE=cpu ", "").split())


def test_the_documented_container_commands_are_the_ones_docker_check_runs():
    serving = (ROOT / "docs" / "serving.md").read_text()
    section = serving[serving.index("### Container"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    shown = [line.strip() for line in block.splitlines() if line.startswith("docker ")]
    run = _docker_check()["COMMANDS"]
    assert {_device_free(c) for c in shown} == {_device_free(c) for c in run.values()}
    assert run["serve"] in shown  # the CPU serving line verbatim, as docker-check runs it
    assert all(c in shown or c.replace("docker run ", "docker run --gpus all ", 1) in shown for c in run.values())


@pytest.mark.slow
def test_the_code_runs_on_the_python_setup_py_promises():
    """The official Paddle 3.3 GPU image ships Python 3.10: python_requires says what the code really needs."""
    import subprocess
    import sys

    vermin = Path(sys.executable).with_name("vermin")  # vermin has no __main__
    done = subprocess.run([str(vermin), "--no-tips", "--eval-annotations", "--violations",
                           "-t=3.10-", "paddle_ft", "tools", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Minimum required versions: 3.10" in done.stdout
    assert setup_kwargs()["python_requires"] == ">=3.10"


@pytest.mark.slow  # builds a wheel in a child process
def test_the_wheel_holds_the_library_and_no_measuring_tool(tmp_path):
    """Issue 47: the bench, gpu-check and the full-size smoke were inside the installed package; they live in
    tools/ now, and the wheel is the toolkit alone (its C++ kernel source included)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    source = tmp_path / "source"
    shutil.copytree(ROOT / "paddle_ft", source / "paddle_ft", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheels"), str(source)], check=True, capture_output=True)
    [wheel] = (tmp_path / "wheels").glob("paddle_ft-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = {name for name in names if name.endswith(".py")}
    assert "paddle_ft/cli.py" in modules and "paddle_ft/engine/trainer.py" in modules
    assert any(name.endswith("fused_kernels.cc") for name in names)
    assert all(name.startswith("paddle_ft/") for name in modules), modules
    assert not [name for name in modules if re.search(r"bench|gpu_check|docker_check|full_size", name)]


def test_the_docker_build_context_leaves_out_every_environment_the_makefile_builds():
    # the build context is the checkout: a tool's environment sent to the daemon fills its disk (CI, stop 72)
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()}
    environments = re.findall(r"^\w+ \?= (\.venv[\w-]*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert {".venv", ".venv-peers", ".venv-label-studio", ".venv-doccano"} <= set(environments)
    left_in = [env for env in environments if not any(fnmatch.fnmatch(env, pattern) for pattern in ignored)]
    assert left_in == []


def test_a_failing_build_shows_its_steps_own_last_lines_not_only_dockers_verdict():
    """CI's docker-check failure read "The command '/bin/sh -c python -m pip install ...' returned a non-zero code: 1"
    and nothing of pip's own error: the legacy builder prints a step's output on stdout, its verdict on stderr."""
    import subprocess

    done = subprocess.CompletedProcess([], 1, stdout="Step 5/9 : RUN python -m pip install /wheels/*.whl\n"
                                                    "Processing /wheels/paddle_ft-0.1-py3-none-any.whl\n"
                                                    "ERROR: Could not install packages due to an OSError: [Errno 28] "
                                                    "No space left on device\n",
                                       stderr="DEPRECATED: The legacy builder is deprecated\n"
                                              "Install the buildx component to build images with BuildKit\n"
                                              "The command '/bin/sh -c python -m pip install' returned a non-zero "
                                              "code: 1\n")
    shown = _docker_check()["failure_output"](done)
    assert "[Errno 28] No space left on device" in shown
    assert shown.endswith("returned a non-zero code: 1") and "DEPRECATED" not in shown
