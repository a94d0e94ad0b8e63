"""One command that proves the GPU path on a GPU machine (`make gpu-check`):

    python tools/gpu_check.py [--output out/gpu_check] [--steps 300]
    python tools/gpu_check.py --device cpu --steps 60     # the same plumbing on a CPU, fp32 only

Prints a pass/fail/skip table (each skip with its reason) and writes OUTPUT/gpu_check.json.
"""
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

GPU_INSTALL = ("pip install '.[gpu]' --extra-index-url https://www.paddlepaddle.org.cn/packages/stable/cu126/ "
               "(or run it in the official Paddle GPU image, or make install first)")


def missing_package() -> str | None:
    """The first package gpu-check needs that this python lacks (paddle, paddle_ft's own dependencies), or None."""
    return next((name for name in ("paddle", "paddlenlp", "yaml", "httpx")
                 if importlib.util.find_spec(name) is None), None)


if __name__ == "__main__":
    if (package := missing_package()) is not None:
        print(f"error: {sys.executable} has no {package}: gpu-check runs paddle_ft with Paddle's GPU build; "
              f"{GPU_INSTALL}", file=sys.stderr)
        sys.exit(1)
    from paddle_ft import runtime

    runtime.quiet()  # before paddle is imported: its warnings on import say nothing to the user
    from bench.gpu_check import main

    sys.exit(main())
