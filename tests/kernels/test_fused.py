"""The fused CPU kernels (`kernels/fused.py`) against the plain Paddle composition they replace: forward and
gradients to 1e-5, whole encoder layers with dropout, and the fall-back where they cannot be built."""
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from conftest import DEMO, overrides

from paddle_ft.engine.amp import clip_grad_norm
from paddle_ft.kernels import fused
from paddle_ft.kernels.fused import (add_layer_norm, attention_core, bias_gelu, dropout, gelu, kernels,
                                     masked_softmax, use_fused_kernels)

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module", autouse=True)
def built():
    module, why_not = kernels()
    assert module is not None, why_not  # this machine has a compiler: the kernels must build here


def test_loading_the_kernels_leaves_no_stub_in_the_cache():
    """Paddle writes a Python stub per loading process beside the library; the cache keeps the library only."""
    module, _ = kernels()
    folder = Path(module.__file__).parent  # the module was imported from this process's stub
    libraries = list(folder.glob("paddle_ft_fused_*.so"))
    assert len(libraries) == 1 and not list(folder.glob(f"{libraries[0].stem}_*.py"))


def test_under_the_profiler_a_kernels_forward_leaves_a_span_named_after_it(tmp_path):
    """The profiler records the kernels' backward as operators but not their forward: each call leaves a span of
    its own (the bench's profile counts the kernels' time from them)."""
    import json

    from paddle import profiler

    x, bias = leaf(np.ones((4, 8))), leaf(np.zeros(8))
    bias_gelu(x, bias)  # before the profiler starts: not in its trace
    with profiler.Profiler(targets=[profiler.ProfilerTarget.CPU],
                           on_trace_ready=profiler.export_chrome_tracing(str(tmp_path))):
        bias_gelu(x, bias).sum().backward()
    events = json.loads(next(tmp_path.glob("*.json")).read_text(encoding="utf-8"))["traceEvents"]
    spans = [event["name"].split("[")[0] for event in events if event.get("cat") == "PythonOp"]
    assert spans == ["paddle_ft_bias_gelu"]


def leaf(values) -> paddle.Tensor:
    tensor = paddle.to_tensor(values, dtype="float32")
    tensor.stop_gradient = False
    return tensor


def outputs_and_gradients(function, inputs: list[paddle.Tensor], upstream: np.ndarray):
    """function(*inputs), and the gradients of sum(output * upstream) with respect to every input."""
    for tensor in inputs:
        tensor.clear_grad()
    out = function(*inputs)
    (out * paddle.to_tensor(upstream)).sum().backward()
    return [out.numpy()] + [tensor.grad.numpy().copy() for tensor in inputs]


@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("shape", [(3, 7, 32), (2, 50, 256), (4, 768), (5, 33)])
def test_the_layer_norm_kernels_are_paddles_layer_norm(shape, with_residual):
    """add_layer_norm(x, residual) against layer_norm(x + residual), layer_norm(x) against itself; 33 wide: rows
    that do not fill the kernels' lanes of 16."""
    rng = np.random.default_rng(sum(shape))
    width = shape[-1]
    norm = paddle.nn.LayerNorm(width, epsilon=1e-12)
    norm.weight.set_value(rng.normal(1, 0.2, width).astype("float32"))
    norm.bias.set_value(rng.normal(0, 0.2, width).astype("float32"))
    x, residual = leaf(rng.normal(0, 2, shape)), leaf(rng.normal(1, 1, shape))
    upstream = rng.normal(0, 1, shape).astype("float32")
    if with_residual:
        inputs, names = [x, residual, norm.weight, norm.bias], ["out", "grad x", "grad residual"]
        plain_fn, fused_fn = (lambda a, b, w, c: F.layer_norm(a + b, [width], w, c, 1e-12),
                              lambda a, b, w, c: add_layer_norm(a, b, norm))
    else:
        inputs, names = [x, norm.weight, norm.bias], ["out", "grad x"]
        plain_fn, fused_fn = (lambda a, w, c: F.layer_norm(a, [width], w, c, 1e-12),
                              lambda a, w, c: fused.layer_norm(a, norm))
    plain = outputs_and_gradients(plain_fn, inputs, upstream)
    ours = outputs_and_gradients(fused_fn, inputs, upstream)
    assert_norms_agree(names + ["grad weight", "grad bias"], plain, ours)


def assert_norms_agree(names: list[str], plain: list[np.ndarray], ours: list[np.ndarray]) -> None:
    for name, expected, got in zip(names, plain, ours):
        # weight and bias gradients sum over every row: relative to their size
        scale = max(1.0, float(np.abs(expected).max())) if name in ("grad weight", "grad bias") else 1.0
        np.testing.assert_allclose(got / scale, expected / scale, **TOLERANCE, err_msg=name)


def padding_mask(lengths: list[int], keys: int) -> paddle.Tensor:
    """PaddleNLP's additive attention mask [batch, 1, 1, keys]: 0 over each text's tokens, -1e4 over its padding."""
    return paddle.to_tensor(np.array([[[[0.0] * n + [-1e4] * (keys - n)]] for n in lengths], dtype="float32"))


def test_gelu_is_paddles_exact_gelu_over_its_whole_range_with_and_without_a_bias():
    # every region of the erf and exp approximations: the tails (clamped at |x| = 4 / 5.66), the middle, zero
    values = np.concatenate([np.linspace(-12, 12, 4801), [0.0, -0.0, 1e-8, -1e-8, 40, -40]]).astype("float32")
    x = leaf(values.reshape(1, -1))
    upstream = np.random.default_rng(0).normal(0, 1, x.shape).astype("float32")
    plain = outputs_and_gradients(lambda t: F.gelu(t, approximate=False), [x], upstream)
    ours = outputs_and_gradients(gelu, [x], upstream)
    for name, expected, got in zip(["out", "grad"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=name)
    # with the FFN's bias added inside: x + bias over the same range, rows of 7
    rows = leaf(values[:4802].reshape(-1, 7) - np.linspace(-1, 1, 7, dtype="float32"))
    bias = leaf(np.linspace(-1, 1, 7))
    upstream = upstream[:, :4802].reshape(rows.shape)
    plain = outputs_and_gradients(lambda t, b: F.gelu(t + b, approximate=False), [rows, bias], upstream)
    ours = outputs_and_gradients(bias_gelu, [rows, bias], upstream)
    for name, expected, got in zip(["out", "grad x", "grad bias"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=f"with a bias: {name}")


# spread 300: a row's scores hundreds apart, so a maximum taken wrong (in the 16-wide chunks or the tail after them)
# leaves exp(score - maximum) above 1 for some score, which the kernel's exp clamps, and the softmax comes out wrong
@pytest.mark.parametrize("spread", [3, 300])
@pytest.mark.parametrize("keys", [5, 64, 131])
def test_masked_softmax_is_paddles_softmax_of_scores_plus_the_padding_mask(keys, spread):
    rng = np.random.default_rng(keys)
    scores = leaf(rng.normal(0, spread, (3, 2, 7, keys)))
    lengths = [keys, max(1, keys // 2), 1]  # a full text, a half-padded one, a single token
    mask = padding_mask(lengths, keys)
    upstream = rng.normal(0, 1, scores.shape).astype("float32")
    plain = outputs_and_gradients(lambda t: F.softmax(t + mask), [scores], upstream)
    ours = outputs_and_gradients(lambda t: masked_softmax(t, mask), [scores], upstream)
    for name, expected, got in zip(["out", "grad"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=name)
    assert float(ours[0][2, :, :, 1:].max()) == 0.0  # the single token's text attends to it alone


def composed_attention(q, k, v, mask, heads: int, p: float) -> paddle.Tensor:
    """Attention's core as MultiHeadAttention composes it from Paddle's ops (heads split off by reshape and
    transpose, scaled q, matmuls, softmax of scores plus mask, dropout), on [batch, length, heads x head_dim]."""
    head_dim = q.shape[-1] // heads
    split = lambda t: t.reshape([0, 0, heads, head_dim]).transpose([0, 2, 1, 3])  # noqa: E731
    weights = F.softmax(paddle.matmul(split(q) * head_dim**-0.5, split(k), transpose_y=True) + mask)
    if p:
        weights = F.dropout(weights, p, training=True)
    return paddle.matmul(weights, split(v)).transpose([0, 2, 1, 3]).reshape([0, 0, q.shape[-1]])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("p, length, heads", [(0.0, 37, 12), (0.1, 37, 12), (0.1, 64, 4), (0.5, 5, 2)])
def test_the_attention_kernel_is_paddles_attention_with_its_dropout(p, length, heads, threads, math_threads):
    """The attention kernel against the composition it replaces: outputs and the gradients of q, k and v to 1e-5,
    the same dropout masks (Paddle's generator, drawn in the composition's order) and the generator left where
    Paddle's dropout leaves it, on one thread and on two; padded keys get no weight."""
    math_threads(threads)
    rng = np.random.default_rng(length + heads)
    batch, width = 4, heads * 32
    q, k, v = (leaf(rng.normal(0, 1, (batch, length, width))) for _ in range(3))
    mask = padding_mask([length, max(1, length // 2), 3 if length > 3 else 1, 1], length)
    upstream = rng.normal(0, 1, (batch, length, width)).astype("float32")
    results = []
    for function in (composed_attention, attention_core):
        paddle.seed(11)
        results.append(outputs_and_gradients(lambda a, b, c: function(a, b, c, mask, heads, p), [q, k, v], upstream)
                       + [paddle.rand([4]).numpy()])
    (plain, ours) = results
    for name, expected, got in zip(["out", "grad q", "grad k", "grad v"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=name)
    assert np.array_equal(plain[-1], ours[-1])  # the generator's next draws
    v_padded = v.numpy().copy()
    v_padded[3, 1:] = 1e3  # the last text has one token: what its padding holds changes nothing of its output
    moved = attention_core(q, k, paddle.to_tensor(v_padded), mask, heads, 0.0).numpy()
    np.testing.assert_allclose(moved[3], attention_core(q, k, v, mask, heads, 0.0).numpy()[3], **TOLERANCE)


@pytest.mark.parametrize("p, shape, drawn_before", [
    (0.1, (2, 4, 33, 33), 0), (0.5, (7,), 0), (0.9, (3, 100, 64), 0),
    # the generator left part-way through its block of 312 draws, a tensor ending at, short of and past a block
    (0.3, (1,), 311), (0.3, (312,), 5), (0.2, (313,), 300), (0.6, (1025,), 17), (0.99999994, (900,), 0)])
def test_dropout_draws_paddles_masks_and_leaves_its_generator_where_paddles_does(p, shape, drawn_before):
    upstream = np.random.default_rng(0).normal(0, 1, shape).astype("float32")
    results = []
    for function in (lambda t: F.dropout(t, p, training=True), lambda t: dropout(t, p, True)):
        paddle.seed(21)
        paddle.rand([drawn_before]) if drawn_before else None
        x = leaf(np.linspace(-3, 3, int(np.prod(shape))).reshape(shape))
        out, grad = outputs_and_gradients(function, [x], upstream)
        results.append((out, grad, paddle.rand([4]).numpy()))  # the generator's next draws
    (plain, plain_grad, plain_next), (ours, our_grad, our_next) = results
    assert np.array_equal(ours, plain) and np.array_equal(our_grad, plain_grad) and np.array_equal(our_next, plain_next)
    if ours.size >= 300:  # about a share p dropped
        assert (ours == 0).mean() == pytest.approx(p, abs=0.1)


@pytest.fixture
def math_threads():
    """Set Paddle's math threads (the kernels' OpenMP team) for one test; afterwards the count training sets."""
    from paddle_ft import runtime

    yield paddle.base.core.set_num_threads
    runtime.apply_cpu_settings()


@pytest.mark.parametrize("threads", [1, 2])
def test_tensors_large_enough_to_split_between_threads_give_paddles_results(threads, math_threads):
    """Over the kernels' threshold (2^15 elements) the rows and blocks are split between Paddle's OpenMP threads,
    and the weight and bias gradients of a layer norm are summed per thread: every output and gradient still agrees
    with Paddle's composition, and dropout with Paddle's masks, on one thread and on two."""
    math_threads(threads)
    rng = np.random.default_rng(threads)
    shape, width = (4, 70, 384), 384  # 107,520 elements
    norm = paddle.nn.LayerNorm(width, epsilon=1e-12)
    norm.bias.set_value(rng.normal(0, 0.2, width).astype("float32"))
    x, residual = leaf(rng.normal(0, 2, shape)), leaf(rng.normal(1, 1, shape))
    upstream = rng.normal(0, 1, shape).astype("float32")
    inputs = [x, residual, norm.weight, norm.bias]
    plain = outputs_and_gradients(lambda a, b, w, c: F.layer_norm(a + b, [width], w, c, 1e-12), inputs, upstream)
    ours = outputs_and_gradients(lambda a, b, w, c: add_layer_norm(a, b, norm), inputs, upstream)
    assert_norms_agree(["out", "grad x", "grad residual", "grad weight", "grad bias"], plain, ours)

    hidden = leaf(rng.normal(0, 3, (2, 70, 1536)))
    plain = outputs_and_gradients(lambda t: F.gelu(t, approximate=False), [hidden], upstream.repeat(4, axis=-1)[:2])
    ours = outputs_and_gradients(gelu, [hidden], upstream.repeat(4, axis=-1)[:2])
    for name, expected, got in zip(["gelu out", "gelu grad"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=name)
    bias = leaf(rng.normal(0, 1, 1536))  # the bias's gradient: each thread's rows summed, then the threads' sums
    plain = outputs_and_gradients(lambda t, b: F.gelu(t + b, approximate=False), [hidden, bias],
                                  upstream.repeat(4, axis=-1)[:2])
    ours = outputs_and_gradients(bias_gelu, [hidden, bias], upstream.repeat(4, axis=-1)[:2])
    for name, expected, got in zip(["bias gelu out", "bias gelu grad x", "bias gelu grad bias"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=name)

    scores = leaf(rng.normal(0, 3, (4, 12, 33, 33)))  # 52,272 elements, rows of 33
    mask = padding_mask([33, 20, 7, 1], 33)
    upstream = rng.normal(0, 1, scores.shape).astype("float32")
    plain = outputs_and_gradients(lambda t: F.softmax(t + mask), [scores], upstream)
    ours = outputs_and_gradients(lambda t: masked_softmax(t, mask), [scores], upstream)
    for name, expected, got in zip(["softmax out", "softmax grad"], plain, ours):
        np.testing.assert_allclose(got, expected, **TOLERANCE, err_msg=name)

    results = []  # (the blocks of 2^14 masks are applied as they are drawn: three whole ones and a shorter last)
    for function in (lambda t: F.dropout(t, 0.1, training=True), lambda t: dropout(t, 0.1, True)):
        paddle.seed(5)
        results.append([*outputs_and_gradients(function, [scores], upstream), paddle.rand([4]).numpy()])
    assert all(np.array_equal(a, b) for a, b in zip(*results))  # the generator left where Paddle's dropout leaves it


@pytest.mark.parametrize("threads", [1, 2])
def test_the_residual_steps_dropout_add_and_norm_in_one_kernel_are_paddles_dropout_then_the_norm(
        threads, math_threads, monkeypatch):
    """norm(dropout(x) + residual) in one kernel (the masks drawn while the rows are normalised) against Paddle's
    dropout followed by add_layer_norm: the same bits, forward and every gradient, on one thread and on two, rows in
    units of 42 with a shorter last one; the generator left where Paddle's dropout leaves it."""
    math_threads(threads)
    rng = np.random.default_rng(7)
    shape, width = (3, 45, 384), 384  # 135 rows: three units of 42 and one of 9
    norm = paddle.nn.LayerNorm(width, epsilon=1e-12)
    norm.bias.set_value(rng.normal(0, 0.2, width).astype("float32"))
    inputs = [leaf(rng.normal(0, 2, shape)), leaf(rng.normal(1, 1, shape)), norm.weight, norm.bias]
    upstream = rng.normal(0, 1, shape).astype("float32")
    drop = paddle.nn.Dropout(0.1)
    composed = (lambda a, b, w, c: add_layer_norm(F.dropout(a, 0.1, training=True), b, norm))
    results = []
    for function in (composed, lambda a, b, w, c: fused._dropout_add_layer_norm(drop, a, b, norm)):
        paddle.seed(5)
        results.append([*outputs_and_gradients(function, inputs, upstream), paddle.rand([4]).numpy()])
        monkeypatch.setattr(fused, "add_layer_norm", None)  # the second one runs the one kernel, not the two
    assert all(np.array_equal(a, b) for a, b in zip(*results))


def gradients(shapes: list[tuple], scale: float) -> list[paddle.Tensor]:
    """Parameters of `shapes` holding random gradients as backward leaves them (tensors that do not stop gradient);
    the word-embedding-sized one spans many kernel blocks."""
    rng = np.random.default_rng(len(shapes))
    parameters = [paddle.create_parameter(list(shape), "float32") for shape in shapes]
    for parameter in parameters:
        parameter.grad_ = paddle.to_tensor(rng.normal(0, scale, parameter.shape).astype("float32"),
                                           stop_gradient=False)
    return parameters


@pytest.mark.parametrize("max_norm", [0.5, 1e9])
def test_clipping_by_the_global_norm_in_one_kernel_is_the_engines_clipping(max_norm, math_threads):
    """The fused clip against amp.clip_grad_norm's Paddle ops: the norm within 1e-6 of a float64 one, the scaled
    gradients within 1e-5 of the ops', and under the limit left exactly as they were; the same bits on one thread
    and on two (the blocks' sums are added in block order)."""
    shapes = [(21128, 256), (384, 1536), (384,), (33,)]
    plain = gradients(shapes, 1e-2)
    exact = float(np.sqrt(sum((p.grad_.numpy().astype(np.float64) ** 2).sum() for p in plain)))
    expected_norm = clip_grad_norm(plain, max_norm)
    results = []
    for threads in (1, 2):
        math_threads(threads)
        fused_ones = gradients(shapes, 1e-2)
        results.append((float(clip_grad_norm(fused_ones, max_norm, fused=True)), fused_ones))
    (norm, fused_ones), (norm_two_threads, on_two_threads) = results
    assert norm == pytest.approx(exact, rel=1e-6) and float(expected_norm) == pytest.approx(exact, rel=1e-6)
    assert norm_two_threads == norm
    for ours, theirs, twos in zip(fused_ones, plain, on_two_threads):
        np.testing.assert_allclose(ours.grad_.numpy(), theirs.grad_.numpy(), **TOLERANCE)
        assert np.array_equal(ours.grad_.numpy(), twos.grad_.numpy())
    measured_only = gradients(shapes, 1e-2)  # in_place=False: the norm and the factor, nothing scaled
    unscaled_norm, factor = fused.clip_grad_norm([p.grad_ for p in measured_only], max_norm, in_place=False)
    assert float(unscaled_norm) == norm and factor == pytest.approx(min(1.0, max_norm / (norm + 1e-6)), rel=1e-6)
    assert all(np.array_equal(a.grad_.numpy(), b.grad_.numpy())
               for a, b in zip(measured_only, gradients(shapes, 1e-2)))
    assert fused.clip_grad_norm([], max_norm)[1] == 1.0  # no gradient: nothing to scale (the kernel takes no list)
    if max_norm > exact:
        untouched = gradients(shapes, 1e-2)
        assert all(np.array_equal(a.grad_.numpy(), b.grad_.numpy()) for a, b in zip(fused_ones, untouched))
    else:
        assert float(np.sqrt(sum((p.grad_.numpy().astype(np.float64) ** 2).sum() for p in fused_ones))) == \
            pytest.approx(max_norm, rel=1e-5)


def adamw_training(fused_step: bool, math_threads):
    """Four steps of a small model under the engine's StepRunner (max_grad_norm 1, gradients dropped after a step):
    AdamW with two learning-rate groups, weight decay on the weights only, PaddleNLP's warmup schedule; gradients
    scaled so that clipping cuts the 1st and 3rd steps and not the others. Returns (weights, the optimizer's
    state_dict, the pre-clip norms, whether the kernel took each step)."""
    from paddlenlp.transformers import LinearDecayWithWarmup

    from paddle_ft.config import AmpConfig
    from paddle_ft.engine.amp import StepRunner

    math_threads(2)  # the blocks of the larger weight split between two threads
    paddle.seed(1)
    model = paddle.nn.Sequential(paddle.nn.Linear(48, 300), paddle.nn.LayerNorm(300), paddle.nn.Linear(300, 250))
    schedule = LinearDecayWithWarmup(1e-2, 20, 2)
    decayed = {p.name for name, p in model.named_parameters() if name.endswith("weight") and name[0] != "1"}
    groups = [{"params": model[0].parameters(), "learning_rate": 0.7},
              {"params": model[1].parameters() + model[2].parameters()}]
    optimizer = paddle.optimizer.AdamW(learning_rate=schedule, parameters=groups, weight_decay=0.1,
                                       apply_decay_param_fun=lambda name: name in decayed)
    runner = StepRunner(AmpConfig(), max_grad_norm=1.0, fused=fused_step, drop_grads=True)
    x = paddle.to_tensor(np.random.default_rng(0).normal(size=(8, 48)).astype("float32"))
    norms, kernel_applies = [], []
    for scale in (30.0, 0.01, 30.0, 0.01):
        (model(x) ** 2 * scale).mean().backward()
        if fused_step:  # (the plain run is left to Paddle's own code entirely)
            kernel_applies.append(fused.adamw_update(optimizer) is not None)
        norms.append(float(runner.step(optimizer, model.parameters())[0]))
        schedule.step()
    state = {key: value.numpy() for key, value in optimizer.state_dict().items() if isinstance(value, paddle.Tensor)}
    return {k: v.numpy() for k, v in model.state_dict().items()}, state, norms, kernel_applies


def test_adamw_in_one_kernel_is_paddles_adamw_after_the_engines_clipping(math_threads):
    """AdamW's update in one kernel with clipping folded in (StepRunner with the fused kernels, on two threads)
    against the clip kernel followed by Paddle's AdamW: weights, moments and beta powers within 1e-5 over four steps
    (two of them clipped), in the optimizer's own state_dict under the same keys; every step the kernel's, the
    first too (the moments made by the optimizer's own code)."""
    runs = []
    for fused_step in (False, True):
        with paddle.utils.unique_name.guard():  # the same parameter and moment names, so the same state_dict keys
            runs.append(adamw_training(fused_step, math_threads))
    (weights, state, norms, _), (fused_weights, fused_state, fused_norms, fused_applies) = runs
    assert fused_applies == [True] * 4
    assert norms[0] > 1 and norms[1] < 1 and fused_norms == pytest.approx(norms, rel=1e-6)
    assert weights.keys() == fused_weights.keys() and state.keys() == fused_state.keys()
    assert {key.rsplit("_", 2)[-2] for key in state if "_pow_" not in key} == {"moment1", "moment2"}
    for expected, actual in ((weights, fused_weights), (state, fused_state)):
        for key in expected:
            np.testing.assert_allclose(actual[key], expected[key], **TOLERANCE, err_msg=key)


def test_adamw_in_one_kernel_leaves_what_it_does_not_compute_to_paddle():
    """AMSGrad, lazy mode, Adam itself: the kernel declines (None) and the engine runs Paddle's step; with no
    gradient it changes nothing."""
    layer = paddle.nn.Linear(4, 3)
    (layer(paddle.ones([2, 4])).sum()).backward()
    for optimizer in (paddle.optimizer.AdamW(parameters=layer.parameters(), amsgrad=True),
                      paddle.optimizer.AdamW(parameters=layer.parameters(), lazy_mode=True),
                      paddle.optimizer.Adam(parameters=layer.parameters())):
        optimizer.step()  # Paddle's step makes the moments
        assert fused.adamw_update(optimizer) is None
    for plain in (paddle.optimizer.AdamW(parameters=layer.parameters()),
                  paddle.optimizer.AdamW(parameters=layer.parameters(), weight_decay=0)):  # an int decay too
        plain.step()
        assert fused.adamw_update(plain) is not None
    untouched = paddle.nn.Linear(2, 2)  # no gradient yet (a frozen model): nothing to update, as in Paddle's step
    before = untouched.weight.numpy()
    fused.adamw_update(paddle.optimizer.AdamW(parameters=untouched.parameters()))(0.5)
    assert np.array_equal(untouched.weight.numpy(), before)


@pytest.mark.parametrize("architecture", ["bert", "ernie", "roberta"])
def test_encoder_layers_train_alike_with_and_without_the_fused_kernels(make_model, architecture, monkeypatch):
    """Dropout on: the fused layer calls the same dropouts in the same order, so the masks are the same and the
    logits and every gradient agree; attention runs in its kernel."""
    ids = np.random.default_rng(1).integers(5, 40, (4, 24))
    ids[1, 15:], ids[3, 4:] = 0, 0  # padding: the attention mask is not all zeros
    ids = paddle.to_tensor(ids)
    attention_calls = []
    monkeypatch.setattr(fused, "attention_core", lambda *args: attention_calls.append(1) or attention_core(*args))
    results = []
    for fuse in (False, True):
        model = make_model(seed=3, dropout=0.2, architecture=architecture)
        if fuse:
            assert use_fused_kernels(model) == (2, None)
        model.train()
        paddle.seed(11)
        logits = model(ids)
        (logits * paddle.to_tensor([[1.0, -2.0]])).sum().backward()
        results.append((logits.numpy(), {name: p.grad.numpy() for name, p in model.named_parameters()
                                         if p.grad is not None}))
    (plain_logits, plain_grads), (fused_logits, fused_grads) = results
    assert len(attention_calls) == 2  # one per layer
    np.testing.assert_allclose(fused_logits, plain_logits, **TOLERANCE)
    assert plain_grads.keys() == fused_grads.keys() and len(plain_grads) > 30
    for name, expected in plain_grads.items():
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(fused_grads[name] / scale, expected / scale, **TOLERANCE, err_msg=name)


def test_evaluation_runs_paddles_own_layer_exactly(make_model):
    ids = paddle.to_tensor([[2, 7, 8, 9, 3, 0]])
    plain, patched = make_model(seed=4, dropout=0.1), make_model(seed=4, dropout=0.1)
    use_fused_kernels(patched)
    plain.eval(), patched.eval()
    assert np.array_equal(plain(ids).numpy(), patched(ids).numpy())


def test_training_says_it_runs_the_fused_kernels(tiny_config_args, capsys):
    from paddle_ft.cli import main

    assert main(["train", "-c", DEMO, *overrides(tiny_config_args + ["train.epochs=1", "data.test=null"])]) == 0
    setup = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cpu: ")]
    assert len(setup) == 1 and setup[0].endswith(
        ", fused CPU kernels (attention, layer norm, GELU, dropout, linear biases) in 2 layers, AdamW's update (with "
        "any clipping) in one kernel")


def test_without_a_compiler_training_says_so_once_and_runs_paddles_kernels(monkeypatch, tiny_config_args, capsys):
    from paddle_ft.cli import main

    monkeypatch.setenv("CXX", "no-such-compiler")
    kernels.cache_clear()
    try:
        assert kernels() == (None, "no C++ compiler (no-such-compiler) on PATH")
        assert main(["train", "-c", DEMO, *overrides(tiny_config_args + ["train.epochs=1", "data.test=null"])]) == 0
    finally:
        kernels.cache_clear()
    printed = capsys.readouterr().out.splitlines()
    unavailable = [line for line in printed if "fused CPU kernels" in line]
    assert unavailable == ["fused CPU kernels unavailable: no C++ compiler (no-such-compiler) on PATH; training runs "
                           "Paddle's own kernels (train.runtime.fused_kernels=false silences this)"]
    assert not any("fused CPU kernels (" in line for line in printed)


@pytest.mark.slow
def test_a_failing_build_is_one_reason_not_a_traceback(monkeypatch, tmp_path):
    broken = tmp_path / "fused_kernels.cc"
    broken.write_text('#include "paddle/extension.h"\nthis is not C++;\n', encoding="utf-8")
    monkeypatch.setattr(fused, "SOURCE", broken)
    monkeypatch.setenv(fused.CACHE_VARIABLE, str(tmp_path / "cache"))
    kernels.cache_clear()
    try:
        module, why_not = kernels()
    finally:
        kernels.cache_clear()
    log = tmp_path / "cache" / next((tmp_path / "cache").iterdir()).name / "build.log"
    assert module is None and "\n" not in why_not
    assert why_not.startswith("the build failed (") and why_not.endswith(f"; the compiler's output is in {log}")
    assert "this is not C++" in log.read_text(encoding="utf-8")  # the compiler's complaint, kept for the user
