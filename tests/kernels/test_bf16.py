"""Issue 66: bfloat16 training on a CPU with bfloat16 arithmetic. The linear layers' matmuls run on oneDNN's bfloat16
GEMM: exactly the float32 sums of the operands rounded to bfloat16 (as Paddle's cast rounds), within bfloat16's
rounding of float32 training, every other tensor float32; a CPU without it is refused in one line."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from conftest import DEMO, overrides

from paddle_ft import runtime
from paddle_ft.kernels import speed_up_cpu_training
from paddle_ft.kernels.cpu_linear import FastLinear
from paddle_ft.kernels.fused import kernels

pytestmark = pytest.mark.skipif(not runtime.cpu_supports_bf16(), reason="bfloat16 training needs a CPU with "
                                "AVX512-BF16 or AMX; this one is " + runtime.cpu_kind())


@pytest.fixture(scope="module")
def module():
    built, why_not = kernels()
    assert built is not None, why_not
    assert hasattr(built, "paddle_ft_bfloat16_gemm"), "Paddle's wheel ships libdnnl.so.3: the GEMM must build here"
    return built


def rounded(values: np.ndarray) -> np.ndarray:
    """float64 copies of `values` rounded to bfloat16 by Paddle's own cast."""
    return paddle.to_tensor(values.astype("float32")).astype("bfloat16").astype("float32").numpy().astype(np.float64)


def test_the_conversion_rounds_as_paddles_cast_and_keeps_nan_and_infinity(module):
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(70_000) * 10.0 ** rng.integers(-30, 30, 70_000),
                             [np.inf, -np.inf, 0.0, -0.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 3.4e38]])
    x = paddle.to_tensor(values.astype("float32"))
    ours = module.paddle_ft_to_bfloat16(x)
    assert ours.dtype == paddle.bfloat16
    np.testing.assert_array_equal(ours.astype("float32").numpy(), x.astype("bfloat16").astype("float32").numpy())
    nan = module.paddle_ft_to_bfloat16(paddle.to_tensor(np.array([np.nan], "float32"))).astype("float32")
    assert np.isnan(nan.numpy()).all()


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (False, True), (True, False), (True, True)])
def test_the_gemm_is_the_float32_sum_of_the_rounded_operands(module, transpose_a, transpose_b):
    rng = np.random.default_rng(1)
    m, k, n = 67, 150, 45
    a = rng.standard_normal((k, m) if transpose_a else (m, k))
    b = rng.standard_normal((n, k) if transpose_b else (k, n))
    to16 = module.paddle_ft_to_bfloat16
    out = module.paddle_ft_bfloat16_gemm(to16(paddle.to_tensor(a.astype("float32"))),
                                         to16(paddle.to_tensor(b.astype("float32"))), transpose_a, transpose_b)
    exact = (rounded(a).T if transpose_a else rounded(a)) @ (rounded(b).T if transpose_b else rounded(b))
    assert out.dtype == paddle.float32 and out.shape == [m, n]
    np.testing.assert_allclose(out.numpy(), exact, rtol=1e-5, atol=1e-4)


def _leaf(*shape, seed):
    tensor = paddle.to_tensor(np.random.default_rng(seed).standard_normal(shape).astype("float32"))
    tensor.stop_gradient = False
    return tensor


@pytest.mark.parametrize("fused_bias", [False, True])
def test_a_linear_layers_output_and_gradients_are_the_rounded_operands_products(module, fused_bias):
    x, w, b = _leaf(4, 70, 32, seed=1), _leaf(32, 128, seed=2), _leaf(128, seed=3)
    upstream = paddle.to_tensor(np.random.default_rng(4).standard_normal((4, 70, 128)).astype("float32"))
    out = FastLinear.apply(x, w, b, module.paddle_ft_add_bias if fused_bias else None, module)
    grad_x, grad_w, grad_b = paddle.grad([out], [x, w, b], [upstream])
    rows, weight = rounded(x.numpy().reshape(-1, 32)), rounded(w.numpy())
    up = rounded(upstream.numpy().reshape(-1, 128))
    np.testing.assert_allclose(out.numpy().reshape(-1, 128), rows @ weight + b.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grad_x.numpy().reshape(-1, 32), up @ weight.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grad_w.numpy(), rows.T @ up, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grad_b.numpy(), upstream.numpy().reshape(-1, 128).sum(0), rtol=1e-5, atol=1e-4)
    # and within bfloat16's rounding of float32's
    reference = paddle.grad([F.linear(x, w, b)], [w], [upstream])[0]
    assert np.abs(grad_w.numpy() - reference.numpy()).max() < 1e-2 * np.abs(reference.numpy()).max()
    frozen = _leaf(32, 128, seed=2)
    frozen.stop_gradient = True
    assert paddle.grad([FastLinear.apply(x, frozen, None, None, module)], [x], [upstream])[0].shape == x.shape


def test_a_model_trains_in_bfloat16_with_float32_weights_and_evaluates_in_float32(make_model, module):
    """Every linear of the encoder (attention's projections, the fused FFN's first matmul, the head) runs the bfloat16
    GEMM while training; gradients stay within bfloat16's rounding of float32's; evaluation is float32 as before."""
    plain, fast = make_model(), make_model()
    fast.set_state_dict(plain.state_dict())
    speedups = speed_up_cpu_training(fast, fast_linear=True, fused_kernels=True, bf16=True)
    assert speedups.bf16_matmuls and "the linear layers' matmuls in bfloat16" in speedups.describe()
    calls = []
    gemm = module.paddle_ft_bfloat16_gemm
    module.paddle_ft_bfloat16_gemm = lambda *args: calls.append(args[2:]) or gemm(*args)
    ids = paddle.to_tensor(np.random.default_rng(0).integers(5, 20, (6, 9)))
    types, labels = paddle.zeros_like(ids), paddle.to_tensor([0, 1, 0, 1, 1, 0])
    try:
        for model in (plain, fast):
            model.train()
            F.cross_entropy(model(ids, types), labels).backward()
    finally:
        module.paddle_ft_bfloat16_gemm = gemm
    linears = sum(isinstance(layer, paddle.nn.Linear) for layer in fast.sublayers())
    assert calls.count((False, False)) == linears  # one forward GEMM per linear layer
    assert len(calls) == 3 * linears  # and two backward ones each (the input's gradient, the weight's)
    pairs = [(name, p.grad.numpy(), q) for (name, p), q in zip(plain.named_parameters(), fast.parameters())]
    # a gradient that is 0 in exact arithmetic (attention's key bias: softmax ignores a shift) is measured against
    # the others' scale, not its own rounding noise
    floor = 1e-2 * max(np.linalg.norm(reference) for _, reference, _ in pairs)
    errors = []
    for name, reference, q in pairs:
        assert q.dtype == paddle.float32 and q.grad.dtype == paddle.float32
        errors.append(np.linalg.norm(q.grad.numpy() - reference) / max(np.linalg.norm(reference), floor))
        assert errors[-1] < 3e-2, name  # bfloat16 keeps 8 bits: ~0.4% a rounding, through two layers and back
    assert 1e-4 < np.median(errors) < 1e-2  # not float32's (the GEMM ran), not wrong
    fast.eval()
    with paddle.no_grad():
        np.testing.assert_allclose(fast(ids, types).numpy(), plain.eval()(ids, types).numpy(), atol=1e-6)


@pytest.mark.slow
def test_train_with_amp_bfloat16_on_this_cpu_logs_it_and_learns(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main

    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + [
        "train.amp.enabled=true", "train.amp.dtype=bfloat16", "train.amp.level=O2"])]) == 0
    captured = capsys.readouterr()
    assert "the linear layers' matmuls in bfloat16" in captured.out  # not Paddle's auto_cast, which warns on a CPU
    assert "amp_guard" not in captured.out + captured.err
    weights = paddle.load(str(tmp_path / "out" / "best" / "model_state.pdparams"))
    assert all(value.dtype == paddle.float32 for value in weights.values())
