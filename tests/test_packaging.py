"""What can be checked of the container and the package without a Docker engine."""
import re
import runpy
from pathlib import Path
from unittest import mock

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
    for copied in re.findall(r"^COPY (\S+)", text, re.M):
        assert (ROOT / copied).exists(), copied
