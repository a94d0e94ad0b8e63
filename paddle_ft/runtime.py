"""Process set-up done once at the command-line edge: environment before paddle is imported, then
the CPU settings that make Paddle fast here (threads, allocator, stride kernels), logged."""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import re
import sys
import threading
import warnings
from pathlib import Path

import paddle_ft.kernels.mkl_vendor as mkl_vendor  # the package itself imports nothing heavy

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

# The user's OMP_NUM_THREADS as it was before `import paddle`, which sets it to 1 when it is unset.
_user_threads: int | None = None
_threads_read = False
_variables_set: set[str] = set()  # environment variables configure() added, not the user
# what `import paddle` puts into os.environ where the user did not: a child process started with them took
# OMP_NUM_THREADS=1 for the user's setting and trained on one math thread (a retraining under serve, a bench's runs)
PADDLE_IMPORT_VARIABLES = ("OMP_NUM_THREADS", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "CUSTOM_DEVICE_ROOT")
_given_before_paddle: set[str] | None = None  # which of those the user had set, read before paddle's import
_mkl_path: str | None = None  # MKL's code path configure() chose on an AMD CPU, for the log
_fast_mkl_asked = False  # the Python API's user called paddle_ft.use_fast_mkl()
LEFT_ALONE = "generic"  # the Python API, not asked to switch: MKL's own choice on an AMD CPU


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


def cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or "unknown"


# the instruction sets that decide which inference precision is fast: AVX2/AVX-512 for fp32, VNNI for int8,
# AVX512-BF16/AMX for bf16
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_speed_flags() -> list[str]:
    """Which of SPEED_FLAGS this CPU has (a bench says which its numbers came from)."""
    flags = set(_cpuinfo_field("flags").split())
    return [flag for flag in SPEED_FLAGS if flag in flags]


def cpu_kind(flags: list[str] | None = None) -> str:
    """Which of the CPU kinds speed figures are stated for (docs/performance.md) this one is, from its speed flags:
    AMX, AVX-512+BF16, AVX-512, AVX2-only or no AVX2."""
    flags = cpu_speed_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512f" in flags:
        return "AVX-512+BF16" if "avx512_bf16" in flags else "AVX-512"
    return "AVX2-only" if "avx2" in flags else "no AVX2"


def cpu_identity() -> str:
    """The CPU's model and speed flags: what a build for this CPU (-march=native) or a measurement on it is keyed
    by, so that a cache from another machine (a shared home, a copied folder) is not taken for this one's."""
    return f"{cpu_model()} {' '.join(cpu_speed_flags())}"


def cpu_supports_bf16() -> bool:
    """True when the CPU has bfloat16 arithmetic (AVX512-BF16 or AMX-BF16), which oneDNN bf16 needs."""
    return bool({"avx512_bf16", "amx_bf16"} & set(_cpuinfo_field("flags").split()))


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Math threads per process: the usable cores shared by the processes the launcher put on this host."""
    local_processes = int(os.environ.get("PADDLE_LOCAL_SIZE", "1") or 1)
    return max(1, usable_cores() // max(1, local_processes))


def configure(fast_mkl: bool = True) -> None:
    """Before paddle is imported. `fast_mkl`: switch MKL's code path on an AMD CPU (_choose_mkl_path), which the
    command line does; the Python API passes False, and then it is switched only where the user asked
    (use_fast_mkl(), PADDLE_FT_MKL_AVX512=1): the switch is process-wide (paddle_ft.kernels.mkl_vendor)."""
    global _user_threads, _threads_read, _mkl_path, _given_before_paddle
    # read once: after the first call paddle may have been imported, and with it OMP_NUM_THREADS=1 set
    if not _threads_read and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        _user_threads = int(os.environ["OMP_NUM_THREADS"])
    if not _threads_read and "paddle" not in sys.modules:
        _given_before_paddle = {name for name in PADDLE_IMPORT_VARIABLES if name in os.environ}
    _threads_read = True
    check_environment()  # a bad value raised on every CPU, not only where it would matter
    if fast_mkl or _fast_mkl_asked or mkl_vendor.asked_for(os.environ):
        _choose_mkl_path()
    elif cpu_vendor() == "AuthenticAMD" and "MKL_DEBUG_CPU_TYPE" not in os.environ and _mkl_path is None:
        _mkl_path = LEFT_ALONE
    _keep_freed_memory()
    quiet()


def _choose_mkl_path() -> None:
    """Paddle's CPU wheel uses Intel MKL, which takes a generic code path on AMD processors: its AVX-512 one where
    the CPU has AVX-512 (paddle_ft.kernels.mkl_vendor), else its AVX2 one (MKL_DEBUG_CPU_TYPE=5, ~2.7x the generic
    path's matmuls here). Before MKL loads; a user's MKL_DEBUG_CPU_TYPE wins."""
    global _mkl_path
    if cpu_vendor() != "AuthenticAMD" or "MKL_DEBUG_CPU_TYPE" in os.environ or _mkl_path == "avx512":
        return
    _mkl_path = "avx2"
    if mkl_vendor.wanted(set(_cpuinfo_field("flags").split()), os.environ):
        why_not = mkl_vendor.load()
        if why_not is None:
            _mkl_path = "avx512"
            return
        _mkl_path = f"avx2 (not AVX-512: {why_not})"
    os.environ["MKL_DEBUG_CPU_TYPE"] = "5"
    _variables_set.add("MKL_DEBUG_CPU_TYPE")


def use_fast_mkl() -> str | None:
    """The Python API's opt-in to what the command line does by default: on an AMD CPU, MKL's AVX-512 path (or its
    AVX2 one) for every MKL in this process, torch's included. Call it before anything imports paddle. Returns the
    path MKL takes (None: not an AMD CPU, or the user's MKL_DEBUG_CPU_TYPE decides)."""
    global _fast_mkl_asked, _mkl_path
    check_environment()
    _fast_mkl_asked = True
    if _mkl_path == LEFT_ALONE:
        _mkl_path = None
    _choose_mkl_path()
    return _mkl_path


def check_environment() -> None:
    """The environment variables paddle_ft reads, checked at every entry point (the commands, `train()`, `Predictor`
    and `Classifier`), so that PADDLE_FT_MKL_AVX512=yes is refused by all alike: a UserError."""
    mkl_vendor.opted_out(os.environ)


def quiet() -> None:
    """Paddle's and PaddleNLP's messages that say nothing to a user kept back: the command line and the Python API
    (`Predictor`, `Classifier`) print the same. Before paddle is imported, for the warnings it gives on import."""
    warnings.filterwarnings("ignore", message="No ccache found")
    warnings.filterwarnings("ignore", message="Setuptools is replacing distutils")
    warnings.filterwarnings("ignore", message="Tensor do not have .place. interface")  # jit.save noise
    # PaddleNLP logs every file it saves or loads at INFO. Its logger is logging's "PaddleNLP", which it sets to DEBUG
    # when imported: a filter on that logger, made now, holds back what is below WARNING without importing PaddleNLP
    # here (4 s of imports that the inference side, which never loads it, would pay at every start)
    paddlenlp = logging.getLogger("PaddleNLP")
    if _below_warning not in paddlenlp.filters:
        paddlenlp.addFilter(_below_warning)


def _below_warning(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def environment_as_given() -> dict[str, str]:
    """The process environment without what configure() and paddle's import added: how a user's own script would
    start, and what a child process (a retraining, a bench's run) is given."""
    added_by_paddle = set(PADDLE_IMPORT_VARIABLES) - (_given_before_paddle or set()) \
        if _given_before_paddle is not None else set()
    return {key: value for key, value in os.environ.items() if key not in _variables_set | added_by_paddle}


def _keep_freed_memory() -> None:
    """Paddle's CPU allocator calls malloc for every activation; glibc serves blocks over 128 KiB with
    a fresh mmap and unmaps them on free, so each op pays page faults on its output (an out-of-place
    scale of a 32x64x256 tensor: 2.2 ms, against 0.16 ms in place). Keeping freed memory in the heap
    makes them reusable. A user's MALLOC_* environment wins."""
    if platform.system() != "Linux" or any(k.startswith("MALLOC_") for k in os.environ):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, ...)
        return
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # the largest glibc allows; larger blocks still mmap
    libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)


def apply_cpu_settings(threads: int | None = None) -> dict:
    """Set Paddle's CPU math threads (default: the user's OMP_NUM_THREADS, else `default_threads()`)
    and turn off stride kernels, whose strided copies after each transpose cost ~8 ms per attention
    tensor in training (0.2 ms with contiguous transposes). Returns what was applied, for the log."""
    import paddle

    threads = threads or _user_threads or default_threads()
    paddle.base.core.set_num_threads(threads)  # Paddle's own default is 1 thread
    paddle.set_flags({"FLAGS_use_stride_kernel": False})
    return {"cpu": cpu_model(), "usable_cores": usable_cores(), "threads": threads,
            "mkl_debug_cpu_type": os.environ.get("MKL_DEBUG_CPU_TYPE"), "mkl_path": _mkl_path}


# how long Paddle's OpenMP threads spin after a parallel region before they sleep, in a thread that shares its
# cores with another engine (backend auto): Intel OpenMP's default is 200 ms, and threads spinning that long after a
# Paddle Inference call slowed the ONNX Runtime calls that followed, some sizes 2-4x (a load measured one text at
# 6.9 ms against 1.5 and sent it to the slower engine); 5 ms still spans the gaps between the ops of one call (Paddle
# Inference as fast as with 200: 3.2-3.5 ms for one text, 73-78 ms for 16)
SHARED_SPIN_MS = 5
_spin_set = threading.local()


def share_cores_with_other_engines() -> None:
    """Shorten the OpenMP spin (SHARED_SPIN_MS) of the calling thread's parallel regions, once per thread: Intel
    OpenMP keeps the setting per thread and for the teams that thread starts. Where Paddle's math is not on Intel
    OpenMP (no libiomp5 beside it), nothing changes."""
    if getattr(_spin_set, "done", False):
        return
    _spin_set.done = True
    library = _intel_openmp()
    if library is not None:
        library.kmp_set_blocktime(SHARED_SPIN_MS)


@functools.cache
def _intel_openmp():
    import paddle

    path = Path(paddle.__file__).parent / "libs" / "libiomp5.so"
    try:
        return ctypes.CDLL(str(path)) if path.is_file() else None
    except OSError:
        return None


def describe(settings: dict) -> str:
    mkl = f", MKL_DEBUG_CPU_TYPE={settings['mkl_debug_cpu_type']}" if settings["mkl_debug_cpu_type"] else ""
    if settings.get("mkl_path"):
        mkl += f", MKL's {settings['mkl_path']} path"
    if settings.get("mkl_path") == LEFT_ALONE:
        mkl += (" (the Python API leaves MKL's vendor check alone; paddle_ft.use_fast_mkl() or PADDLE_FT_MKL_AVX512=1 "
                "switches every MKL in the process to its AVX-512 or AVX2 path, 1.7-1.8x a training step here)")
    return f"cpu: {settings['cpu']}, {settings['usable_cores']} usable cores, {settings['threads']} math threads{mkl}"


# paddlenlp 2.8.1 fails to import with newer releases of these (setup.py pins them below these versions)
IMPORT_PINS = {"huggingface_hub": (0, 26), "aistudio-sdk": (0, 3), "datasets": (3,)}


def broken_pin() -> str | None:
    """One line naming an installed package newer than paddle_ft's pin, with the command that fixes it; None
    when every pin holds (an ImportError then is something else)."""
    from importlib.metadata import PackageNotFoundError, version

    for package, below in IMPORT_PINS.items():
        try:
            installed = version(package)
        except PackageNotFoundError:
            continue
        numbers = tuple(int(part) for part in re.findall(r"\d+", installed)[:len(below)])
        if numbers >= below:
            pin = f"{package}<{'.'.join(map(str, below))}"
            return (f"{package} {installed} is installed, but paddlenlp 2.8.1 imports only with {pin}: "
                    f"pip install '{pin}'")
    return None
