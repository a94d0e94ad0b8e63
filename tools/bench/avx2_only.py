"""Run a paddle_ft command as it runs on an AVX2-only CPU (an AMD EPYC without AVX-512, the slowest kind this
project plans for) on a machine that has AVX-512: how docs/demo.md times the demo for that CPU where none is at hand.

    python tools/bench/avx2_only.py train -c configs/demo.yaml

What it holds back: MKL's AVX-512 path (MKL_DEBUG_CPU_TYPE=5, the AVX2 path an AVX2-only AMD CPU gets), oneDNN's
(ONEDNN_MAX_CPU_ISA=AVX2) and the fused kernels' (built for x86-64-v3, AVX2 + FMA, instead of -march=native).
What it cannot: the clock, caches and memory bandwidth of the other CPU, so the figures are an estimate, said so
wherever they are used."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's paddle_ft, as the tools/ wrappers

os.environ["MKL_DEBUG_CPU_TYPE"] = "5"  # before MKL loads; runtime.configure() then leaves MKL's vendor check alone
os.environ["ONEDNN_MAX_CPU_ISA"] = os.environ["DNNL_MAX_CPU_ISA"] = "AVX2"

from paddle_ft import runtime  # noqa: E402  (after the environment above)

runtime.configure()  # before paddle's import, which sets OMP_NUM_THREADS=1 where it is unset
import paddle_ft.kernels.fused as fused  # noqa: E402
from paddle_ft.cli import main  # noqa: E402

fused.FLAGS[fused.FLAGS.index("-march=native")] = "-march=x86-64-v3"

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
