"""One command that proves the GPU path on a GPU machine (`make gpu-check`):

    python tools/gpu_check.py [--output out/gpu_check] [--steps 300]
    python tools/gpu_check.py --device cpu --steps 60     # the same plumbing on a CPU, fp32 only

Prints a pass/fail/skip table (each skip with its reason) and writes OUTPUT/gpu_check.json.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.gpu_check import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
