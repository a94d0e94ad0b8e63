"""MKL's AVX-512 code path on AMD processors: before Paddle (and so MKL) loads, a one-line library whose
`mkl_serv_intel_cpu_true` returns 1 is loaded into the process's global symbol scope, where MKL's vendor check
resolves to it.

Why: MKL picks its kernels by CPU vendor, not by instruction set. On a non-Intel CPU it runs a generic path, or
its AVX2 one under MKL_DEBUG_CPU_TYPE=5; its AVX-512 kernels it keeps for Intel. On a 2-core AMD EPYC with AVX-512
(docs/performance.md): cblas_sgemm at 4096 x 384 x 1536 95 GFLOP/s generic, 257 with MKL_DEBUG_CPU_TYPE=5, 505
with this library; the bench's training job at e5-small's shape 1.73-1.83x faster. The function is an MKL
internal, not an API: MKL still checks the instruction sets itself, so a CPU without AVX-512 never gets AVX-512
code. Where the library cannot be built or loaded, MKL_DEBUG_CPU_TYPE=5 is the fallback; a future MKL that stopped
calling the function would take its generic path instead (nothing here can tell that it did).

The switch is process-wide: every MKL in the process resolves the function to this library, torch's included (its
float64 matmul, linalg.inv and FFT then give other bits, 1e-15 to 1e-7 apart), and MKL_DEBUG_CPU_TYPE is read by
every MKL too. So `python -m paddle_ft` (a process of its own) switches by default, and the Python API only when
asked: `paddle_ft.use_fast_mkl()` or PADDLE_FT_MKL_AVX512=1 (paddle_ft.runtime)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from paddle_ft.errors import UserError
from paddle_ft.io import atomic_path, user_cache_folder

SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
# 1: the AVX-512 path (the command line's default; the Python API's when set); 0: MKL's AVX2 one (MKL_DEBUG_CPU_TYPE=5)
OPT_OUT_VARIABLE = "PADDLE_FT_MKL_AVX512"
CACHE_VARIABLE = "PADDLE_FT_KERNEL_CACHE"  # the fused kernels' cache (paddle_ft.kernels.fused), shared


def opted_out(environ) -> bool:
    """True where the user set PADDLE_FT_MKL_AVX512=0. Any value but 0 or 1 is a mistake ("false" would otherwise
    leave the path on without a word), raised whatever the CPU, so that a setting is checked where it is written."""
    value = environ.get(OPT_OUT_VARIABLE, "1")
    if value not in ("0", "1"):
        raise UserError(f"{OPT_OUT_VARIABLE}={value!r}: give 1 (MKL's AVX-512 path on an AMD CPU that has AVX-512, "
                        f"the default) or 0 (MKL's AVX2 path there)")
    return value == "0"


def asked_for(environ) -> bool:
    """True where the user set PADDLE_FT_MKL_AVX512=1 (checked as opted_out checks it): the Python API then switches
    MKL's path as the command line does."""
    return not opted_out(environ) and environ.get(OPT_OUT_VARIABLE) == "1"


def wanted(cpu_flags: set[str], environ) -> bool:
    """On an AMD CPU (the caller checks): True where it has AVX-512 and the user did not opt out."""
    return "avx512f" in cpu_flags and not opted_out(environ)


def load() -> str | None:
    """Builds (once per machine, cached) and loads the library into the global scope. Returns None when it is
    loaded, else why not. Must run before paddle is imported: MKL binds the function when it first checks."""
    if "paddle" in sys.modules:
        return "paddle was imported before paddle_ft.runtime.configure()"
    library, why_not = built_library()
    if library is None:
        return why_not
    try:
        ctypes.CDLL(str(library), mode=os.RTLD_GLOBAL)
    except OSError as exc:
        return f"the library {library} could not be loaded ({type(exc).__name__})"
    return None


def built_library() -> tuple[Path | None, str | None]:
    """(the library, built once per machine into the kernel cache, None), or (None, why not). Another process takes
    the same path with LD_PRELOAD (the bench gives the Hugging Face peer MKL's path paddle_ft takes)."""
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        return None, f"no C compiler ({compiler}) on PATH"
    cache = user_cache_folder(CACHE_VARIABLE, "kernels")
    if cache is None:
        return None, f"no home directory to keep the library in; set {CACHE_VARIABLE} to a writable folder"
    library = cache / f"mkl-intel-cpu-true-{hashlib.sha256(SOURCE.encode()).hexdigest()[:12]}.so"
    try:
        if not library.is_file():
            _build(compiler, library)
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"the library {library} could not be built ({type(exc).__name__})"
    return library, None


def _build(compiler: str, library: Path) -> None:
    """Compiled (the source on standard input) beside its final name and renamed into place: a concurrent process
    loads a whole file or builds its own."""
    library.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(library) as built:
        subprocess.run([compiler, "-x", "c", "-shared", "-fPIC", "-O2", "-o", str(built), "-"], input=SOURCE,
                       text=True, check=True, capture_output=True)
