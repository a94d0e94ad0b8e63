"""MKL's AVX-512 path on AMD (paddle_ft.kernels.mkl_vendor): chosen only where it applies, loaded before Paddle, and the
matmuls it runs give the same numbers."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from paddle_ft import cli, runtime
from paddle_ft.kernels import mkl_vendor
from paddle_ft.errors import UserError


@pytest.mark.parametrize("flags, environ, expected", [
    ({"avx2", "avx512f"}, {}, True),
    ({"avx2"}, {}, False),  # no AVX-512: MKL_DEBUG_CPU_TYPE=5's AVX2 path is the fastest there is
    ({"avx2", "avx512f"}, {mkl_vendor.OPT_OUT_VARIABLE: "0"}, False),
    ({"avx2", "avx512f"}, {mkl_vendor.OPT_OUT_VARIABLE: "1"}, True),
])
def test_the_avx512_path_is_wanted_only_with_avx512_and_no_opt_out(flags, environ, expected):
    assert mkl_vendor.wanted(flags, environ) is expected


@pytest.mark.parametrize("value", ["false", "yes", "", " 0"])
def test_an_opt_out_other_than_0_or_1_is_one_line_naming_the_variable_and_its_values(value):
    with pytest.raises(UserError) as raised:
        mkl_vendor.opted_out({mkl_vendor.OPT_OUT_VARIABLE: value})
    assert str(raised.value) == (f"PADDLE_FT_MKL_AVX512={value!r}: give 1 (MKL's AVX-512 path on an AMD CPU that "
                                 f"has AVX-512, the default) or 0 (MKL's AVX2 path there)")


def test_the_command_line_says_a_bad_opt_out_in_one_line_on_any_cpu(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "cpu_vendor", lambda: "GenuineIntel")  # where the variable changes nothing
    monkeypatch.setenv(mkl_vendor.OPT_OUT_VARIABLE, "false")
    assert cli.main(["train", "--help"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: PADDLE_FT_MKL_AVX512='false': give 1 (MKL's AVX-512 path on an AMD CPU that has AVX-512, the "
        "default) or 0 (MKL's AVX2 path there)"]


def test_the_python_api_refuses_a_bad_opt_out_as_the_commands_do(monkeypatch, tmp_path):
    """Issue 64, root 8: PADDLE_FT_MKL_AVX512=yes was refused by the commands and taken by Predictor/Classifier."""
    from conftest import export_tiny_model

    from paddle_ft import Classifier, train
    from paddle_ft.inference.predictor import Predictor

    export = export_tiny_model(tmp_path / "model")
    monkeypatch.setenv(mkl_vendor.OPT_OUT_VARIABLE, "yes")
    for entry in (lambda: Predictor(export), lambda: Classifier(export), lambda: train(tmp_path / "none.yaml")):
        with pytest.raises(UserError, match=r"^PADDLE_FT_MKL_AVX512='yes': give 1"):
            entry()


@pytest.fixture
def amd_cpu(monkeypatch):
    """runtime on an AMD CPU with `flags`, no MKL_DEBUG_CPU_TYPE given, nothing chosen yet; the environment
    restored afterwards."""
    monkeypatch.setattr(runtime, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(runtime, "_mkl_path", None)
    monkeypatch.setattr(runtime, "_variables_set", set())
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "placeholder")
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE")  # recorded, so whatever configure() sets is undone

    def with_flags(flags: str):
        monkeypatch.setattr(runtime, "_cpuinfo_field", lambda name: flags if name == "flags" else "")
    return with_flags


def test_without_avx512_an_amd_cpu_gets_mkls_avx2_path(amd_cpu):
    amd_cpu("sse4_2 avx2 fma")
    runtime._choose_mkl_path()
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "5" and runtime._mkl_path == "avx2"
    assert "MKL_DEBUG_CPU_TYPE" not in runtime.environment_as_given()


def test_the_avx512_path_falls_back_to_avx2_and_says_why_once_paddle_is_loaded(amd_cpu):
    import paddle  # noqa: F401  (this process's MKL has done its vendor check: too late to load the library)

    amd_cpu("avx2 avx512f")
    runtime._choose_mkl_path()
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "5"
    assert runtime._mkl_path == "avx2 (not AVX-512: paddle was imported before paddle_ft.runtime.configure())"


def test_a_users_mkl_debug_cpu_type_wins(amd_cpu, monkeypatch):
    amd_cpu("avx2 avx512f")
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "4")
    runtime._choose_mkl_path()
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "4" and runtime._mkl_path is None


def test_the_python_api_leaves_mkl_alone_unless_asked_and_says_how(amd_cpu, monkeypatch):
    """Issue 66: the switch is process-wide (torch's MKL too), so train() makes it only where the user asked."""
    amd_cpu("avx2 avx512f")
    monkeypatch.setattr(runtime, "_fast_mkl_asked", False)
    monkeypatch.delenv(mkl_vendor.OPT_OUT_VARIABLE, raising=False)
    runtime.configure(fast_mkl=False)
    assert "MKL_DEBUG_CPU_TYPE" not in os.environ and runtime._mkl_path == runtime.LEFT_ALONE
    line = runtime.describe({"cpu": "AMD EPYC", "usable_cores": 2, "threads": 2, "mkl_debug_cpu_type": None,
                             "mkl_path": runtime._mkl_path})
    assert line.endswith("MKL's generic path (the Python API leaves MKL's vendor check alone; paddle_ft.use_fast_mkl() "
                         "or PADDLE_FT_MKL_AVX512=1 switches every MKL in the process to its AVX-512 or AVX2 path, "
                         "1.7-1.8x a training step here)")
    monkeypatch.setattr(mkl_vendor, "load", lambda: "a test")  # paddle is loaded here: the AVX2 fallback
    assert runtime.use_fast_mkl() == "avx2 (not AVX-512: a test)" and os.environ["MKL_DEBUG_CPU_TYPE"] == "5"
    runtime.configure(fast_mkl=False)  # asked once: the next train() keeps it
    assert runtime._mkl_path == "avx2 (not AVX-512: a test)"


def test_the_variable_set_to_1_is_the_python_apis_opt_in(amd_cpu, monkeypatch):
    amd_cpu("avx2")
    monkeypatch.setattr(runtime, "_fast_mkl_asked", False)
    monkeypatch.setenv(mkl_vendor.OPT_OUT_VARIABLE, "1")
    runtime.configure(fast_mkl=False)
    assert runtime._mkl_path == "avx2" and os.environ["MKL_DEBUG_CPU_TYPE"] == "5"


def test_without_a_home_directory_the_library_is_not_built_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.delitem(sys.modules, "paddle", raising=False)  # as before paddle loads; restored afterwards
    monkeypatch.delenv(mkl_vendor.CACHE_VARIABLE, raising=False)
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # what it returns where HOME is unknown
    monkeypatch.chdir(tmp_path)
    assert mkl_vendor.load().startswith("no home directory to keep the library in")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_library_loads_before_paddle_and_paddles_matmuls_agree_with_numpy(tmp_path):
    """In a fresh process: the library is built into the cache, MKL's vendor check resolves to it, a second
    process reuses the build, and Paddle's matmul (MKL's sgemm, AVX-512 on an AMD CPU that has it) matches float64
    numpy within 1e-5 relative."""
    script = textwrap.dedent("""
        import ctypes, numpy as np
        from paddle_ft.kernels import mkl_vendor
        assert mkl_vendor.load() is None
        assert ctypes.CDLL(None).mkl_serv_intel_cpu_true() == 1
        import paddle
        paddle.set_device("cpu")
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((512, 384)), rng.standard_normal((384, 1536))
        product = paddle.matmul(paddle.to_tensor(a, "float32"), paddle.to_tensor(b, "float32")).numpy()
        exact = a.astype("float32").astype("float64") @ b.astype("float32").astype("float64")
        print(float(np.abs(product - exact).max() / np.abs(exact).max()))
        """)
    env = {**os.environ, mkl_vendor.CACHE_VARIABLE: str(tmp_path), "OMP_NUM_THREADS": "2"}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    [library] = tmp_path.glob("mkl-intel-cpu-true-*.so")
    built_at = library.stat().st_mtime_ns
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert library.stat().st_mtime_ns == built_at
    assert float(first.stdout.split()[-1]) < 1e-5 and float(second.stdout.split()[-1]) < 1e-5


MKL_AVX512_BANNER = "Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512)"


@pytest.mark.slow
@pytest.mark.skipif(runtime.cpu_vendor() != "AuthenticAMD" or "avx512f" not in runtime.cpu_speed_flags(),
                    reason="MKL's AVX-512 path on AMD applies to an AMD CPU with AVX-512 only; this is not one")
@pytest.mark.parametrize("how, avx512", [("command line", True), ("python api", False), ("opted out", False),
                                         ("python api, asked", True)])
def test_mkls_own_dispatch_line_names_the_avx512_path_exactly_where_it_is_switched(tmp_path, how, avx512):
    """MKL_VERBOSE's first line is MKL's own account of the code path its vendor check chose: AVX-512 where
    paddle_ft switched it (not the shim's return value, which is 1 on any CPU), Intel(R) Architecture otherwise."""
    script = textwrap.dedent(f"""
        import paddle_ft
        from paddle_ft import runtime
        if {how!r} == "python api, asked":
            paddle_ft.use_fast_mkl()
        runtime.configure(fast_mkl={how in ("command line", "opted out")})
        import paddle
        x = paddle.ones([64, 64])
        print(float(paddle.matmul(x, x).sum()))
        """)
    env = {**os.environ, mkl_vendor.CACHE_VARIABLE: str(tmp_path), "MKL_VERBOSE": "1"}
    env.pop("MKL_DEBUG_CPU_TYPE", None)
    env.pop(mkl_vendor.OPT_OUT_VARIABLE, None)
    if how == "opted out":
        env[mkl_vendor.OPT_OUT_VARIABLE] = "0"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    banner = next(line for line in done.stdout.splitlines() if line.startswith("MKL_VERBOSE Intel(R) MKL"))
    assert (MKL_AVX512_BANNER in banner) is avx512, banner
    assert done.stdout.split()[-1] == str(64.0 ** 3)
