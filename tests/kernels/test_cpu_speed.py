"""The CPU speed settings change how fast training runs, never what it computes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from paddle_ft import runtime
from paddle_ft.kernels.cpu_linear import FastLinear, use_fast_linear
from paddle_ft.kernels.fused import kernels


def _leaf(*shape, seed):
    paddle.seed(seed)
    value = paddle.randn(list(shape))
    value.stop_gradient = False
    return value


def _grads(fn, leaves, upstream):
    for leaf in leaves:
        leaf.clear_gradient()
    out = fn()
    (out * upstream).sum().backward()
    return [out.numpy()] + [leaf.grad.numpy() for leaf in leaves]


@pytest.mark.parametrize("fused_bias", [False, True])
def test_fast_linear_gives_the_same_output_and_gradients_as_paddle_linear(fused_bias):
    """With the fused kernels' bias add too (a 280 x 128 output: over their threshold, split between threads)."""
    add_bias = kernels()[0].paddle_ft_add_bias if fused_bias else None
    x, w, b = _leaf(4, 70, 32, seed=1), _leaf(32, 128, seed=2), _leaf(128, seed=3)
    upstream = paddle.randn([4, 70, 128])
    expected = _grads(lambda: F.linear(x, w, b), [x, w, b], upstream)
    got = _grads(lambda: FastLinear.apply(x, w, b, add_bias), [x, w, b], upstream)
    for name, e, g in zip(("out", "grad_x", "grad_w", "grad_b"), expected, got):  # (grad_b: sums of 280 rows)
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=name)
    no_bias = _grads(lambda: FastLinear.apply(x, w, None, add_bias), [x, w], upstream)
    for e, g in zip(_grads(lambda: F.linear(x, w), [x, w], upstream), no_bias):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_patched_model_trains_identically_and_evaluates_with_paddle_linear(make_model):
    plain, fast = make_model(), make_model()
    fast.set_state_dict(plain.state_dict())
    assert use_fast_linear(fast) == sum(isinstance(m, paddle.nn.Linear) for m in fast.sublayers())
    ids = paddle.to_tensor(np.random.default_rng(0).integers(5, 20, (6, 9)))
    types = paddle.zeros_like(ids)
    labels = paddle.to_tensor([0, 1, 0, 1, 1, 0])
    for model in (plain, fast):
        model.train()
        F.cross_entropy(model(ids, types), labels).backward()
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    fast.eval()
    calls = []
    original = FastLinear.apply
    FastLinear.apply = lambda *a: calls.append(1) or original(*a)
    try:
        with paddle.no_grad():
            np.testing.assert_allclose(fast(ids, types).numpy(), plain.eval()(ids, types).numpy(), atol=1e-6)
    finally:
        FastLinear.apply = original
    assert calls == []  # evaluation (and export, which traces in eval mode) uses Paddle's linear


def test_cpu_settings_set_the_threads_and_report_them(monkeypatch):
    monkeypatch.setattr(runtime, "_user_threads", None)
    settings = runtime.apply_cpu_settings(1)
    assert settings["threads"] == 1 and paddle.get_flags("FLAGS_use_stride_kernel")["FLAGS_use_stride_kernel"] is False
    assert "1 math threads" in runtime.describe(settings)
    monkeypatch.setattr(runtime, "usable_cores", lambda: 4)
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "2")
    assert runtime.default_threads() == 2  # 4 cores shared by 2 launcher processes on this host
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "8")
    assert runtime.default_threads() == 1  # never 0
    monkeypatch.setattr(runtime, "_user_threads", 3)
    assert runtime.apply_cpu_settings()["threads"] == 3
    runtime.apply_cpu_settings(runtime.usable_cores())


def test_the_users_threads_are_read_once_before_paddles_import_sets_them(monkeypatch):
    """paddle's import sets OMP_NUM_THREADS=1 where it is unset: a second configure() (a tool that set up the
    process itself, then ran the command line) must not take that for the user's choice."""
    monkeypatch.setattr(runtime, "_threads_read", False)
    monkeypatch.setattr(runtime, "_user_threads", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    runtime.configure()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what `import paddle` does next
    runtime.configure()
    assert runtime._user_threads is None
    monkeypatch.setattr(runtime, "_threads_read", False)
    runtime.configure()  # a process whose first reading finds the user's setting keeps it
    assert runtime._user_threads == 1


@pytest.mark.slow
@pytest.mark.parametrize("user_threads", [None, "3"])
def test_a_child_process_gets_the_environment_without_what_paddles_import_set(user_threads):
    """A retraining under serve (and any child) was started with the OMP_NUM_THREADS=1 that `import paddle` sets,
    took it for the user's choice and trained on one math thread; a user's own setting is passed on."""
    script = textwrap.dedent("""
        import json, os
        from paddle_ft import runtime
        runtime.configure()
        import paddle
        assert os.environ["OMP_NUM_THREADS"]  # set by paddle where the user did not
        given = runtime.environment_as_given()
        print(json.dumps({name: given.get(name) for name in runtime.PADDLE_IMPORT_VARIABLES}))
        """)
    env = {key: value for key, value in os.environ.items() if key not in runtime.PADDLE_IMPORT_VARIABLES}
    if user_threads:
        env["OMP_NUM_THREADS"] = user_threads
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == {"OMP_NUM_THREADS": user_threads, "KMP_DUPLICATE_LIB_OK": None,
                                                        "KMP_INIT_AT_FORK": None, "CUSTOM_DEVICE_ROOT": None}
