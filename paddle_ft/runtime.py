"""Process set-up done once at the command-line edge, before paddle is imported."""
from __future__ import annotations

import os
import warnings


def _cpuinfo_field(name: str) -> str:
    """The value of the first `name : value` line in /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_vendor() -> str:
    return _cpuinfo_field("vendor_id") or "unknown"


def cpu_supports_bf16() -> bool:
    """True when the CPU has bfloat16 arithmetic (AVX512-BF16 or AMX-BF16), which oneDNN bf16 needs."""
    return bool({"avx512_bf16", "amx_bf16"} & set(_cpuinfo_field("flags").split()))


def configure() -> None:
    # Paddle's CPU wheel uses Intel MKL, which takes a slow code path on AMD processors unless told
    # otherwise (about 2x on matmul here). It must be set before MKL loads; a user's value wins.
    if cpu_vendor() == "AuthenticAMD":
        os.environ.setdefault("MKL_DEBUG_CPU_TYPE", "5")
    warnings.filterwarnings("ignore", message="No ccache found")
    warnings.filterwarnings("ignore", message="Setuptools is replacing distutils")
    warnings.filterwarnings("ignore", message="Tensor do not have .place. interface")  # jit.save noise
    from paddlenlp.utils.log import logger

    logger.set_level("WARNING")  # PaddleNLP logs every file it saves or loads at INFO
