"""The GPU path's failure modes, reproduced on CPU where they can be (issue 10): mixed-dtype clipping
under AMP O2, saving an O2 model, parity computed on one device, silent fp32 on older GPUs, and RNG
state that depends on how many GPUs are visible."""
import sys

import numpy as np
import paddle
import pytest
from conftest import DEMO, count_tensor_reads, overrides, synthetic_rows, tiny_meta

from paddle_ft.cli import main
from paddle_ft.config import AmpConfig
from paddle_ft.engine.amp import check_amp_supported, clip_grad_norm
from paddle_ft.engine.checkpoint import capture_rng, restore_rng
from paddle_ft.errors import ConfigError
from paddle_ft.kernels import fused


def mixed_dtype_parameters():
    """One 16-bit and one float32 parameter with gradients, as AMP O2 leaves LayerNorm next to the rest
    (bfloat16 here: the CPU kernels have no float16 multiply; a GPU run has float16)."""
    constant = paddle.nn.initializer.Constant(0.5)
    half = paddle.create_parameter([4], "bfloat16", default_initializer=constant)
    full = paddle.create_parameter([3], "float32", default_initializer=constant)
    loss = (half.astype("float32") * paddle.to_tensor([3.0, 0, 4, 0])).sum() + (full * 12).sum()
    loss.backward()
    return half, full


def test_paddles_own_clipping_fails_on_mixed_dtypes_and_ours_does_not():
    half, full = mixed_dtype_parameters()
    with pytest.raises(Exception):  # CPU: no float16 p_norm kernel; GPU: stacking float16 with float32 norms
        paddle.nn.utils.clip_grad_norm_([half, full], 1.0)
    total = clip_grad_norm([half, full], 1.0)
    expected = np.sqrt(3**2 + 4**2 + 3 * 12**2)  # 21.42
    assert float(total) == pytest.approx(expected, rel=1e-6)
    assert half.grad.dtype == paddle.bfloat16 and full.grad.dtype == paddle.float32
    clipped = np.concatenate([half.grad.astype("float32").numpy(), full.grad.numpy()])
    assert np.linalg.norm(clipped) == pytest.approx(1.0, rel=1e-2)  # bfloat16 rounding of the scaled grads


def test_clipping_scales_float32_gradients_by_their_exact_global_norm(make_model, tokenizer):
    model = make_model(seed=2)
    model(paddle.to_tensor([[2, 7, 8, 9, 3]])).sum().backward()
    grads = [p.grad.numpy().astype(np.float64) for p in model.parameters()]
    exact = np.sqrt(sum(float((g ** 2).sum()) for g in grads))
    total = clip_grad_norm(model.parameters(), 0.01)
    assert float(total) == pytest.approx(exact, rel=1e-6)
    for clipped, grad in zip(model.parameters(), grads):
        np.testing.assert_allclose(clipped.grad.numpy(), grad * 0.01 / (exact + 1e-6), rtol=1e-5, atol=1e-12)

    # under the limit: the gradients left exactly as they were (no multiply by 1)
    model.clear_gradients()
    model(paddle.to_tensor([[2, 7, 8, 9, 3]])).sum().backward()
    before = [p.grad.numpy().copy() for p in model.parameters()]
    assert float(clip_grad_norm(model.parameters(), 1e6)) == pytest.approx(exact, rel=1e-6)
    assert all(np.array_equal(p.grad.numpy(), grad) for p, grad in zip(model.parameters(), before))


def test_the_global_norm_of_a_word_embedding_gradient_is_exact():
    """A large gradient of small values (a word embedding's): the sum of squares is within 1e-6 of float64, where
    Paddle's p_norm was 0.7% off on CPU (which is why clip_grad_norm does not use it)."""
    paddle.seed(1)
    weight = paddle.create_parameter([21128, 256], "float32")
    weight.grad_ = paddle.randn([21128, 256]) * 1e-3
    exact = float(np.sqrt((weight.grad_.numpy().astype(np.float64) ** 2).sum()))
    assert float(clip_grad_norm([weight], 1e9)) == pytest.approx(exact, rel=1e-6)


def test_a_float16_model_is_saved_in_float32_and_reloads(make_model, tokenizer, tmp_path):
    from paddle_ft.artifacts.bundle import load_bundle, save_bundle

    model = make_model(seed=3)
    model.to(dtype="float16")  # what AMP O2 leaves: float16 weights
    assert model.classifier.weight.dtype == paddle.float16
    save_bundle(tmp_path / "best", model, tokenizer, tiny_meta())
    loaded = load_bundle(tmp_path / "best").model  # a float32 model: "Variable dtype not match" before the fix
    for (name, original), reloaded in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert reloaded.dtype == paddle.float32, name
        assert np.array_equal(original.astype("float32").numpy(), reloaded.numpy()), name


def test_export_computes_both_sides_of_parity_on_the_cpu(make_model, tokenizer, tmp_path, monkeypatch):
    """In a CUDA build the model would load onto the GPU (TF32) while the parity predictor runs on CPU."""
    import paddle_ft.export as export
    from paddle_ft.artifacts.bundle import save_bundle

    best = tmp_path / "best"
    save_bundle(best, make_model(seed=5), tokenizer, tiny_meta())
    device, calls = ["gpu:0"], []  # as in a CUDA build
    monkeypatch.setattr(paddle.device, "get_device", lambda: device[0])
    monkeypatch.setattr(paddle.device, "set_device", lambda name: calls.append(name) or device.__setitem__(0, name))
    real_load = export.load_bundle
    monkeypatch.setattr(export, "load_bundle", lambda d: calls.append(f"load on {device[0]}") or real_load(d))
    export.export_model(best, tmp_path / "export")
    assert calls == ["cpu", "load on cpu", "gpu:0"]


@pytest.mark.parametrize("dtype, check", [("bfloat16", "is_bfloat16_supported"), ("float16", "is_float16_supported")])
def test_amp_on_a_gpu_without_that_precision_is_refused(dtype, check, monkeypatch):
    monkeypatch.setattr(paddle.amp, check, lambda device=None: False)  # a T4 (bf16) or a pre-Volta GPU
    amp = AmpConfig(enabled=True, dtype=dtype)
    with pytest.raises(ConfigError, match=rf"config key 'train.amp.dtype': {dtype} is not supported on"):
        check_amp_supported(amp, "gpu:0")
    check_amp_supported(AmpConfig(enabled=True, dtype="float16"), "cpu")  # float16 on a CPU changes nothing
    check_amp_supported(AmpConfig(enabled=False, dtype=dtype), "gpu:0")


def test_bfloat16_training_on_a_cpu_without_bfloat16_arithmetic_is_refused_in_one_line(monkeypatch):
    """Issue 66: oneDNN would emulate it, slower than float32; a CPU with it trains (tests/kernels/test_bf16.py)."""
    from paddle_ft import runtime

    monkeypatch.setattr(runtime, "cpu_supports_bf16", lambda: False)
    monkeypatch.setattr(runtime, "cpu_speed_flags", lambda: ["avx2"])
    with pytest.raises(ConfigError) as refused:
        check_amp_supported(AmpConfig(enabled=True, dtype="bfloat16"), "cpu")
    assert str(refused.value) == ("config key 'train.amp.dtype': bfloat16 training on a CPU needs bfloat16 arithmetic "
                                  "(AVX512-BF16 or AMX), which this AVX2-only CPU lacks: it would run slower than "
                                  "float32; set train.amp.enabled=false")


@pytest.mark.parametrize("enabled, flags, width, expected", [
    ("auto", ["avx2", "avx512f", "avx512_bf16"], 384, (True, "precision: the linear layers' matmuls in bfloat16 "
     "(train.amp.enabled auto: this AVX-512+BF16 CPU runs a 384-wide model's linear layers 1.6-1.8x faster so "
     "(docs/performance.md); train.amp.enabled=false overrules)")),
    ("auto", ["avx2", "amx_bf16"], 32, (False, "precision: float32 (train.amp.enabled auto: bfloat16 pays from 256 "
     "wide, and this model is 32; train.amp.enabled=true -o train.amp.dtype=bfloat16 overrules)")),
    ("auto", ["avx2"], 768, (False, "precision: float32 (train.amp.enabled auto: this AVX2-only CPU has no bfloat16 "
     "arithmetic; train.amp.enabled=true overrules)")),
    (True, ["avx2", "avx512f", "avx512_bf16"], 32, (True, None)),  # asked: no line, whatever the width
    (False, ["avx2", "avx512f", "avx512_bf16"], 384, (False, None)),
])
def test_amp_auto_chooses_bfloat16_on_a_cpu_that_has_it_for_a_model_wide_enough(enabled, flags, width, expected,
                                                                               monkeypatch):
    from paddle_ft import runtime
    from paddle_ft.engine.amp import bf16_on_cpu

    monkeypatch.setattr(runtime, "cpu_speed_flags", lambda: flags)
    monkeypatch.setattr(runtime, "cpu_supports_bf16", lambda: bool({"avx512_bf16", "amx_bf16"} & set(flags)))
    monkeypatch.setattr(fused, "kernels", lambda: (type("Built", (), {"paddle_ft_bfloat16_gemm": None}), None))
    amp = AmpConfig(enabled=enabled, dtype="bfloat16" if enabled is True else "float16")
    assert bf16_on_cpu(amp, "cpu", width) == expected
    assert bf16_on_cpu(amp, "gpu:0", width) == (False, None)  # a GPU: Paddle's AMP, where true asks for it
    assert bf16_on_cpu(AmpConfig(), "cpu", 384, fast_linear=False)[0] is False


def test_rng_state_holds_this_process_device_only_and_restores_exactly():
    state = capture_rng()
    assert set(state) == {"python", "numpy", "paddle_cpu"}  # on a GPU also "paddle_gpu": one device, any count
    first = (paddle.rand([3]).numpy(), np.random.rand(2), __import__("random").random())
    restore_rng(state)
    second = (paddle.rand([3]).numpy(), np.random.rand(2), __import__("random").random())
    assert all(np.array_equal(a, b) for a, b in zip(first, second))


@pytest.mark.gpu
def test_rng_state_on_a_gpu_is_that_of_the_device_in_use():
    state = capture_rng()
    assert "paddle_gpu" in state
    first = paddle.rand([3]).numpy()
    restore_rng(state)
    assert np.array_equal(first, paddle.rand([3]).numpy())


def test_tensorrt_on_a_paddle_3_export_is_refused_not_silently_ignored(tmp_path):
    from conftest import export_tiny_model

    from paddle_ft.errors import UserError
    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.inference.predictor import Predictor

    export = export_tiny_model(tmp_path)
    assert (export / "model.json").is_file()  # Paddle 3 writes PIR programs
    with pytest.raises(UserError, match=r"--tensorrt: .*model.json is a Paddle 3 \(PIR\) program"):
        Predictor(export, PredictOptions(device="gpu", precision="fp16", use_tensorrt=True))


@pytest.mark.gpu
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_float16_training_clips_saves_float32_and_evaluates_on_a_gpu(level, tiny_config_args, tmp_path, capsys):
    from conftest import DEMO, overrides

    from paddle_ft.cli import main

    out = tmp_path / "out"
    args = tiny_config_args + ["train.amp.enabled=true", "train.amp.dtype=float16", f"train.amp.level={level}",
                               "train.max_steps=20", "train.optimizer.max_grad_norm=1.0"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    best = paddle.load(str(out / "best" / "model_state.pdparams"))
    assert all(v.dtype == paddle.float32 for v in best.values())
    assert main(["eval", "--model", str(out / "best"), "--data", str(tmp_path / "data" / "dev.tsv")]) == 0


@pytest.mark.gpu
def test_export_on_a_gpu_machine_checks_the_gpu_predictor_too(tmp_path):
    import json

    from conftest import export_tiny_model

    info = json.loads((export_tiny_model(tmp_path) / "export.json").read_text())
    assert info["parity_max_abs_diff"] <= 1e-4 and info["parity_max_abs_diff_gpu"] <= 1e-2



def test_gpu_check_never_deletes_a_folder_it_did_not_write(tmp_path, capsys):
    from bench.gpu_check import main

    (tmp_path / "notes.txt").write_text("mine")
    assert main(["--output", str(tmp_path), "--device", "cpu"]) == 2
    assert "holds files gpu-check did not write" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.skipif(paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0, reason="a GPU is here")
def test_gpu_check_without_a_gpu_fails_in_one_line_and_writes_nothing(tmp_path, capsys):
    """Issue 28: it printed one SKIP and exited 0, a check that could not fail."""
    from bench.gpu_check import main

    assert main(["--output", str(tmp_path / "check")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA GPU found (paddle ") and err.count("\n") == 1 and "checked nothing" in err


@pytest.mark.slow
@pytest.mark.skipif(paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0, reason="a GPU is here")
def test_the_gpu_check_command_without_a_gpu_prints_one_line_and_exits_1(tmp_path):
    """Issue 67: as `make gpu-check` runs it, paddle's "No ccache found" warning on import came first."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "tools" / "gpu_check.py"
    done = subprocess.run([sys.executable, str(script), "--output", str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: no CUDA GPU found (paddle ")
    assert not (tmp_path / "check").exists()


def test_o2_keeps_float32_gradients_so_micro_batches_are_summed_in_float32(monkeypatch):
    """Issue 28: O2 decorated without master_grad sums float16/bfloat16 gradients over accumulated micro-batches.
    Paddle's decorate does nothing on a CPU, so this holds the call; gpu_check asserts the gradients' dtype on a GPU."""
    from paddle_ft.engine.amp import StepRunner

    calls = []
    monkeypatch.setattr(paddle.amp, "decorate", lambda **kwargs: calls.append(kwargs) or (kwargs["models"],
                                                                                         kwargs["optimizers"]))
    StepRunner(AmpConfig(enabled=True, dtype="bfloat16", level="O2"), 1.0).prepare("model", "optimizer")
    StepRunner(AmpConfig(enabled=True, dtype="float16", level="O1"), 1.0).prepare("model", "optimizer")
    assert calls == [{"models": "model", "optimizers": "optimizer", "level": "O2", "dtype": "bfloat16",
                      "master_weight": True, "master_grad": True, "excluded_layers": None}]  # a plain layer


class NoiseSeen(paddle.nn.Layer):
    """ELECTRA's model, recording the Gumbel noise it is given."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.noise = inner, []

    def forward(self, ids, types, positions, noise):
        self.noise.append(noise.numpy())
        return self.inner(ids, types, positions, noise)


def test_electra_noise_differs_per_example_and_is_the_same_however_examples_are_split(make_model, tokenizer):
    """Issue 28: the noise was one host array per (seed, step), the same rows for every micro-batch and rank. Now each
    example's rows come from (seed, step, example), drawn by Paddle on the training device, and the global generator
    (dropout's) is left as it was."""
    from paddle_ft.data.features import Features
    from paddle_ft.data.masking import Vocabulary
    from paddle_ft.engine.objectives.electra import ReplacedTokenDetecting
    from paddle_ft.engine.objectives.masked_lm import MaskedLanguageModelling
    from paddle_ft.models.networks import ReplacedTokenDetection

    model = NoiseSeen(ReplacedTokenDetection(make_model(seed=1).encoder, make_model(seed=2).encoder))
    vocabulary = Vocabulary(len(tokenizer), tokenizer.mask_token_id, frozenset(range(5)))
    objective = ReplacedTokenDetecting(MaskedLanguageModelling(vocabulary, 0, seed=3, rate=0.3))
    ids = [np.array([2, *range(5 + i, 25 + i), 3]) for i in range(3)]
    features = Features(ids, [np.zeros_like(x) for x in ids], None)
    paddle.seed(11)
    expected_dropout_stream = paddle.rand([4]).numpy()
    paddle.seed(11)
    for micro_batch in ([0], [1], [2], [0, 1, 2]):  # three micro-batches (or ranks), then one batch of them all
        objective._forward(model, features, micro_batch, 7, __import__("contextlib").nullcontext)
    assert np.array_equal(paddle.rand([4]).numpy(), expected_dropout_stream)
    alone, together = model.noise[:3], model.noise[3]
    assert all(a.shape == alone[0].shape for a in alone)  # same masked count: on main their rows were equal
    assert not np.allclose(alone[0], alone[1]) and not np.allclose(alone[1], alone[2])
    assert np.array_equal(np.concatenate(alone), together)
    objective._forward(model, features, [1], 8, __import__("contextlib").nullcontext)
    assert not np.allclose(model.noise[-1], alone[1])  # a new step, new noise
    gumbel = together.ravel()
    # Gumbel(0, 1): mean Euler's gamma, standard deviation pi / sqrt(6); within 5 standard errors
    assert np.isfinite(gumbel).all() and abs(gumbel.mean() - 0.5772) < 5 * 1.2825 / np.sqrt(gumbel.size)


@pytest.mark.parametrize("tf32", [True, False, None])
def test_tf32_is_set_from_the_config_and_left_as_paddle_has_it_by_default(tf32, tiny_config_args, tmp_path):
    """Issue 67: train.amp.tf32 was false by default, applied on every run, while Paddle's own default is on
    (phi's context pool starts with allow_tf32_cublas true): a first fp32 run on an H100 was slower than plain Paddle.
    Unset (null), the switch stays as the process had it; true or false set it. The switch exists in every build (on a
    CPU it changes nothing)."""
    from paddle.base import core

    from paddle_ft.cli import main

    before = core.get_cublas_switch()
    for had in (True, False):
        core.set_cublas_switch(had)
        setting = [] if tf32 is None else [f"train.amp.tf32={str(tf32).lower()}"]
        try:
            assert main(["train", "--config", DEMO, *overrides([*tiny_config_args, "train.max_steps=1",
                                                                f"output_dir={tmp_path / f'run-{had}'}",
                                                                *setting])]) == 0
            assert core.get_cublas_switch() is (had if tf32 is None else tf32)
        finally:
            core.set_cublas_switch(before)


def test_the_largest_batch_search_doubles_then_bisects_and_stops_at_its_budget():
    from bench.search import ProbeFailed, largest_batch

    tried = []

    def fits(batch):
        tried.append(batch)
        return batch <= 300

    assert largest_batch(fits, 32, budget_seconds=60) == (300, 301, None)
    assert tried[:6] == [32, 64, 128, 256, 512, 384] and len(tried) == 13  # 5 doublings, then 8 halvings of 256
    clock = iter(range(100)).__next__  # one second per reading: the budget ends the search with a bracket
    assert largest_batch(lambda batch: batch <= 300, 32, budget_seconds=7, clock=clock) == (256, 384, None)  # 6 trials
    assert largest_batch(lambda batch: True, 32, budget_seconds=60, cap=100) == (64, None, None)  # nothing failed

    def broken(batch):
        if batch > 64:
            raise ProbeFailed("no such file")
        return True

    assert largest_batch(broken, 32) == (64, None, "no such file")  # another failure ends the search, said


def row(samples_per_s, activation_mib, finite=True, skipped_share=0.0, host_ms=12.0, waiting_ms=300.0):
    return {"samples_per_s": samples_per_s, "activation_mib": activation_mib, "finite": finite,
            "skipped_share": skipped_share, "host_ms": host_ms, "waiting_ms": waiting_ms}


def test_the_amp_verdict_needs_both_fp32_rows_healthy_rows_and_judges_activations():
    """Issue 46: the verdict compared with TF32-off fp32 only, ignored NaN losses and skipped steps, and judged the
    whole peak, which O2's float32 master weights raise on a healthy GPU."""
    from bench.gpu_check import amp_verdict

    rows = {"fp32 TF32 off": row(100, 6000), "fp32 TF32 on": row(130, 6000), "fp16 O1": row(150, 4000),
            "fp16 O2": row(140, 3000)}
    check = amp_verdict(rows)
    assert check.status == "pass" and check.numbers == {
        "fastest": "fp16 O1", "speedup_tf32_off": 1.5, "speedup_tf32_on": 150 / 130, "leanest": "fp16 O2",
        "activation_ratio": 0.5}
    assert "1.50x the samples/s of fp32 with TF32 off, 1.15x with TF32 on; fp16 O2 0.50x" in check.detail
    rows["fp32 TF32 on"]["samples_per_s"] = 140  # 1.07x TF32 on: fp32 on tensor cores is nearly as fast
    assert amp_verdict(rows).status == "fail" and "1.07x with TF32 on" in amp_verdict(rows).detail
    rows["fp32 TF32 on"]["samples_per_s"] = 130
    rows["fp16 O2"]["finite"] = False  # a row that diverged fails the check, however fast
    assert amp_verdict(rows).status == "fail" and "unhealthy rows: fp16 O2" in amp_verdict(rows).detail
    rows["fp16 O2"] = row(140, 3000, skipped_share=0.05)
    assert amp_verdict(rows).status == "fail"
    rows["fp16 O2"] = row(140, 5000)  # 0.67x is the leanest now; 0.8x would fail
    assert amp_verdict(rows).numbers["activation_ratio"] == pytest.approx(4000 / 6000)
    rows["fp16 O1"], rows["fp16 O2"] = row(150, 4800), row(140, 4900)
    assert amp_verdict(rows).status == "fail"
    assert amp_verdict({"fp32 TF32 off": rows["fp32 TF32 off"]}).status == "fail"  # no AMP row is no pass


def test_the_amp_speed_floors_are_not_judged_where_the_host_bounds_the_step():
    """Issue 67: where the host's eager dispatch outlasts the GPU's step, AMP against fp32 measures Python: the
    speed floors become a skip that says so; memory and health still fail the check."""
    from bench.gpu_check import amp_verdict

    rows = {"fp32 TF32 off": row(100, 6000), "fp32 TF32 on": row(100, 6000, host_ms=11, waiting_ms=0.5),
            "fp16 O1": row(101, 4000, host_ms=11, waiting_ms=0.2), "fp16 O2": row(100, 3000)}
    check = amp_verdict(rows)
    assert check.status == "skip" and check.detail.startswith("speed not judged: fp32 TF32 on, fp16 O1 host-bound")
    assert "fp16 O1 11 (0)" in check.detail  # every row's host ms a step and its wait
    rows["fp16 O2"]["finite"] = False  # a row that diverged fails it whatever bounds the speed
    assert amp_verdict(rows).status == "fail"


def test_the_profile_splits_each_step_into_queueing_and_waiting_and_names_the_bound():
    from bench.gpu_check import profile_check

    check = profile_check({32: row(400, 3000, host_ms=11.4, waiting_ms=0.6), 128: row(900, 9000, host_ms=11.0,
                                                                                     waiting_ms=130.0)})
    assert check.status == "pass"
    assert check.detail == ("batch 32: 12 ms a step, the host 11 ms queueing it and 1 ms waiting for the GPU "
                            "(host-bound); batch 128: 141 ms a step, the host 11 ms queueing it and 130 ms waiting "
                            "for the GPU (GPU-bound)")
    assert profile_check({128: row(900, 9000)}).status == "fail"  # the batch-32 row failed: said, not passed


def test_a_rows_activation_memory_is_its_peak_less_what_the_first_step_left(tmp_path):
    from bench.gpu_check import speed_and_memory

    from paddle_ft.artifacts.run import RunFiles

    import json

    def metrics(skipped: list[int]) -> dict:
        lines = [{"event": "train", "step": 10 * (i + 1), "loss": 0.7 - 0.1 * i, "samples_per_s": 50.0 + 10 * i,
                  "host_ms_per_step": 12.0 - i, "waiting_ms_per_step": 100.0 * i, "skipped_steps": n, "gpu_memory_peak_mib": 5000 + 200 * i, "gpu_memory_after_first_step_mib": 1800}
                 for i, n in enumerate(skipped)]
        RunFiles(tmp_path).metrics_file.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
        return speed_and_memory(tmp_path)

    # issue 67: one skip in the first window is float16's scaler finding its scale (2^15 halved on an overflow):
    # it failed a healthy 40-step row (2.5% against the 2% bound); skips after the first window are counted
    assert metrics([1, 1, 1, 1]) == {"samples_per_s": 70.0, "host_ms": 10.0, "waiting_ms": 200.0, "peak_mib": 5600,
                                     "activation_mib": 3800, "finite": True, "skipped_share": 0.0}
    assert metrics([1, 2, 2, 2])["skipped_share"] == pytest.approx(1 / 30)  # an overflow later: 3.3% of 30 steps


def test_the_fp32_gpu_predictor_is_held_to_the_bound_its_tf32_gemms_allow():
    """Issue 67: the fp32 GPU predictor was held to 1e-4 of the CPU's while Paddle Inference computes fp32 GEMMs in
    TF32 on Ampere and newer; the export's own GPU parity allows 1e-2."""
    from bench.gpu_check import PREDICTOR_BOUNDS

    assert PREDICTOR_BOUNDS == {"cpu": 1e-4, "fp32": 1e-2, "fp16": 2e-2}


@pytest.mark.parametrize("table, link, scaling, status", [
    ("        GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-63\nGPU1\tNV18\t X \t0-63\n", "NV18", 1.7, "fail"),
    ("        GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-63\nGPU1\tPHB\t X \t0-63\n", "PHB", 1.7, "pass"),
    ("        GPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X\n", "SYS", 1.5, "fail"),
    ("no table", "unknown", 1.65, "pass"),
])
def test_two_gpu_scaling_is_judged_by_the_interconnect_it_says(table, link, scaling, status):
    """Issue 67: 2 GPUs >= 1.8x one failed PCIe H100 pairs without NVLink; the floor follows the link
    (`nvidia-smi topo -m`), and the verdict names it."""
    from bench.gpu_check import link_between_gpu0_and_gpu1, scaling_verdict

    assert link_between_gpu0_and_gpu1(table) == link
    check = scaling_verdict("2 GPUs", "fp16 O1", scaling, link)
    assert check.status == status and f"over {link} (floor " in check.detail


@pytest.mark.slow
def test_gpu_checks_two_process_check_launches_paddle_ft_and_matches_one_process_on_cpu(tmp_path):
    """Issue 46, finding 1: the launcher was handed tools/bench/__main__.py, which does not exist, so both
    2-GPU checks could never pass; --device cpu never reached them. Here the same check runs 2 gloo processes."""
    from bench.gpu_check import TWO_PROCESS_ROWS, TwoProcessRow, two_process_check, write_recipe

    config = write_recipe(tmp_path / "data", steps=30)
    small = ["model.scratch.hidden_size=64", "model.scratch.num_layers=1", "model.scratch.num_heads=2",
             "model.scratch.intermediate_size=128", "train.checkpoints.every=0"]
    check = two_process_check(tmp_path, ["--config", str(config), *small], device="cpu")
    assert check.status == "pass", check.detail
    assert check.name == "2-process gloo on the CPU" and check.numbers["max_abs_weight_diff"] < 1e-3
    assert "replicas identical: True" in check.detail and "losses finite: True" in check.detail
    # issue 67: the data-parallel + O2 + accumulation row, on a CPU a skip (no fp16 AMP here); its plumbing
    # (accumulated micro-batches all-reduced) in float32
    o2 = two_process_check(tmp_path, ["--config", str(config), *small], "cpu", TWO_PROCESS_ROWS[1])
    assert (o2.status, o2.name) == ("skip", "2-process gloo on the CPU, fp16 O2, accumulation 2")
    accumulated = two_process_check(tmp_path, ["--config", str(config), *small], "cpu",
                                    TwoProcessRow("accumulation 2", (), TWO_PROCESS_ROWS[1].per_rank))
    assert accumulated.status == "pass", accumulated.detail


@pytest.mark.slow
def test_gpu_checks_killed_rank_check_resumes_to_the_uninterrupted_weights_on_cpu(tmp_path):
    """Issue 67, item 8: the acceptance run's kill -9 of one rank, then train.resume=auto, as 2 gloo processes."""
    from bench.gpu_check import killed_rank_check, write_recipe

    config = write_recipe(tmp_path / "data", steps=30)
    small = ["model.scratch.hidden_size=64", "model.scratch.num_layers=1", "model.scratch.num_heads=2",
             "model.scratch.intermediate_size=128"]
    check = killed_rank_check(tmp_path / "killed", ["--config", str(config), *small], device="cpu")
    assert check.status == "pass", check.detail
    assert check.numbers == {"max_abs_weight_diff": 0.0}
    assert f"resumed from {tmp_path / 'killed' / 'broken' / 'checkpoints' / 'step-'}" in check.detail


@pytest.mark.slow
def test_the_batch_search_never_probes_a_batch_larger_than_its_file(tmp_path):
    """Issue 46, finding 4: the search probed up to 8,192 on a 1,280-row file, so every probe above 1,280 "fit"
    while training on 1,280. Here on a CPU: a 100-row file stops the doubling at 64, and each probe's plan held the
    batch it claims."""
    from bench.gpu_check import batch_search_check, write_recipe

    from paddle_ft.data.readers import Columns, read_examples

    config = write_recipe(tmp_path / "data", steps=10)
    rows = read_examples(tmp_path / "data" / "train.tsv", "tsv", Columns("text", None, "label"))[0][:100]
    (tmp_path / "data" / "small.tsv").write_text("text\tlabel\n" + "".join(f"{e.text}\t{e.label}\n" for e in rows),
                                                 encoding="utf-8")
    small = [f"data.train={tmp_path / 'data' / 'small.tsv'}", "model.scratch.hidden_size=32",
             "model.scratch.num_layers=1", "model.scratch.num_heads=2", "model.scratch.intermediate_size=64",
             "train.checkpoints.keep=0", "train.evaluation.every=0"]
    check = batch_search_check(tmp_path / "search", ["--config", str(config), *small], "fp32", rows=100,
                               device="cpu", start=32, budget_seconds=300)
    assert check.status == "pass", check.detail
    assert check.numbers == {"largest_batch": 64, "first_unfit": None}
    assert sorted(p.name for p in (tmp_path / "search").iterdir()) == ["batch-32", "batch-64"]
    assert not list((tmp_path / "search").glob("*/checkpoints/step-*"))  # keep 0: a probe writes no checkpoint


def test_keep_0_checkpoints_nothing_and_a_stop_says_so(tiny_config_args, tmp_path):
    from paddle_ft.engine.interrupt import TrainingInterrupted

    args = tiny_config_args + ["train.checkpoints.keep=0", "train.checkpoints.every=5", "train.epochs=1"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    out = tmp_path / "out"
    assert (out / "best").is_dir() and not list(out.glob("checkpoints/step-*"))
    message = str(TrainingInterrupted(15, 7, None))
    assert message == ("stopped by signal 15 after step 7; nothing was saved (train.checkpoints.keep is 0), so the "
                       "run starts over when run again")


def test_gpu_check_plans_ten_minutes_and_searches_batches_only_when_asked():
    """Issue 46: 32 child processes and two 150 s searches made gpu-check ~16-20 minutes on one H100."""
    from bench.gpu_check import ESTIMATE_SECONDS, plan

    one_gpu = plan("gpu", 1, batch_search=False)
    assert "batch search" not in one_gpu and "about 10 minutes in all" in one_gpu
    assert sum(ESTIMATE_SECONDS[p] for p in ("small", "paths", "bert-base")) <= 600
    assert "batch search ~5 min" in plan("gpu", 1, batch_search=True)
    # issue 67: the plan says what is checked in which order, the TF32 switch first
    assert one_gpu.split("In its order: ")[1].startswith("the cuBLAS TF32 switch before and after paddle_ft's")
    assert "bert-base fp16 O2's host time against waiting for the GPU at batch 32 and 128" in one_gpu
    assert one_gpu.endswith("2 GPUs against one, plain and with fp16 O2 and accumulation 2; a kill -9 of one of 2 "
                            "ranks, then train.resume=auto to the uninterrupted job's weights")


@pytest.mark.parametrize("reducer, expected", [(True, ["no_sync", "backward", "backward"]),
                                               (False, ["no_sync", "backward", "no_sync", "backward", "average"])])
def test_accumulated_micro_batches_are_all_reduced_once_by_hand_never_by_the_reducer(reducer, expected):
    """Issue 46, finding 2: DataParallel + AMP O2 + accumulation crashed on the synced micro-batch (the reducer's
    16-bit buckets met float32 master gradients). With accumulation every backward runs under no_sync and the
    gradients are averaged once after the last (the same path, in fp32, is what the 2-gloo-rank accumulation test of
    test_distributed.py runs end to end)."""
    import contextlib
    from types import SimpleNamespace

    from paddle_ft.engine.amp import StepRunner
    from paddle_ft.engine.distributed import Distributed
    from paddle_ft.engine.trainer import Throughput, _forward_backward

    calls = []

    class Ranks(Distributed):
        def average_gradients(self, parameters):
            calls.append("average")

    class Model(paddle.nn.Linear):
        @contextlib.contextmanager
        def no_sync(self):
            calls.append("no_sync")
            yield

    class Objective:
        def loss(self, model, features, indices, step, autocast):
            calls.append("backward")
            return model(paddle.ones([len(indices), 2])).sum()

    features = SimpleNamespace(input_ids=[[1, 2, 3]] * 8)
    _forward_backward(Model(2, 1), StepRunner(AmpConfig(), 1.0), Objective(), features, list(range(8)), 0,
                      batch_size=2, dist=Ranks(rank=0, world_size=2), speed=Throughput(), reducer=reducer)
    assert calls == expected


def test_an_o2_checkpoint_resumes_in_a_process_that_built_other_layers_first(tmp_path):
    """Issue 46, finding 3: master weights kept the name they had where they were saved, AdamW finds their moments
    by it, and a process that numbered its layers otherwise asserted on the first step ("... moment1_0 should in
    state dict"). The CPU has no bfloat16 AdamW kernel, so the accumulators are made as the first step makes them."""
    from paddle_ft.engine.checkpoint import _internal_to_structured, _rename_keys, _with_master_names

    class Scale(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.weight = self.create_parameter([4], dtype="bfloat16",
                                                default_initializer=paddle.nn.initializer.Constant(0.5))

    def built():
        model = Scale()
        optimizer = paddle.optimizer.AdamW(parameters=model.parameters(), multi_precision=True)
        return model, optimizer

    def first_step_accumulators(model, optimizer):
        optimizer._create_accumulators(paddle.static.default_main_program().global_block(),
                                       list(model.parameters()))

    model, optimizer = built()
    first_step_accumulators(model, optimizer)
    saved = optimizer.state_dict()
    moment = next(key for key in saved if "moment1" in key)
    saved[moment].set_value(paddle.full_like(saved[moment], 3.0))  # a moment the resume must bring back
    paddle.save(_rename_keys(saved, _internal_to_structured(model)), str(tmp_path / "optimizer.pdopt"))

    [Scale() for _ in range(3)]  # this process numbers its layers otherwise
    model, optimizer = built()
    loaded = _rename_keys(paddle.load(str(tmp_path / "optimizer.pdopt")),
                          {v: k for k, v in _internal_to_structured(model).items()})
    optimizer.set_state_dict(_with_master_names(loaded))
    first_step_accumulators(model, optimizer)  # asserted before
    restored = [v for k, v in optimizer.state_dict().items() if "moment1" in k]
    assert len(restored) == 1 and float(restored[0].numpy().max()) == 3.0


def count_host_reads(monkeypatch) -> dict:
    """Counts the host reads (conftest.count_tensor_reads) while the training loop runs its steps, evaluations and
    _finish excluded."""
    from paddle_ft.engine import trainer

    counts = count_tensor_reads(monkeypatch)
    real_steps, real_finish, real_evaluate = trainer._steps_left, trainer._finish, trainer._evaluate_and_keep_best

    def steps(*args):
        for item in real_steps(*args):
            counts["on"] = True
            yield item
        counts["on"] = False

    def finish(*args):
        counts["on"] = False
        return real_finish(*args)

    def evaluate(*args):
        counts["on"] = False
        try:
            return real_evaluate(*args)
        finally:
            counts["on"] = True

    monkeypatch.setattr(trainer, "_steps_left", steps)
    monkeypatch.setattr(trainer, "_finish", finish)
    monkeypatch.setattr(trainer, "_evaluate_and_keep_best", evaluate)
    return counts


def test_a_training_step_reads_the_host_once(tiny_config_args, monkeypatch):
    """Issue 46 (host syncs): a step read its loss, then the ranks' sum of it (a second read under data parallel).
    Now one read per step (the loss, summed over the ranks first; with clipping, the gradient norm at log steps): the
    floor while a non-finite step is skipped, which Paddle's eager optimizer decides on the host (docs/status.md).
    Clipping is off here: on a CPU it reads its scale to skip a no-op multiply."""
    counts = count_host_reads(monkeypatch)
    copies = []
    real_to_tensor = paddle.to_tensor

    def to_tensor(data, *args, **kwargs):  # counted where a micro-batch's array is put on the device
        if sys._getframe(1).f_code.co_filename.endswith("batch_copies.py"):
            copies.append(np.shape(data))
        return real_to_tensor(data, *args, **kwargs)

    monkeypatch.setattr(paddle, "to_tensor", to_tensor)
    args = tiny_config_args + ["data.dev=null", "data.test=null", "train.max_steps=20", "train.runtime.log_every=10",
                               "train.checkpoints.keep=0", "train.optimizer.max_grad_norm=null",
                               "train.runtime.write_report=false"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    assert counts["reads"] == 20
    # issue 67: each step's host->device copies, 3 (the ids, their types, the labels), through batch_copies, which
    # on a GPU builds them in pinned memory and copies without blocking
    assert len(copies) == 3 * 20 and {len(shape) for shape in copies} == {1, 2}


def test_an_electra_step_of_two_micro_batches_reads_the_host_once(tiny_config_args, tmp_path, monkeypatch):
    """Issue 46 (host syncs, ELECTRA included): its objective read a count of replaced tokens per micro-batch."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(text for text, _ in synthetic_rows(400, seed=5)) + "\n", encoding="utf-8")
    counts = count_host_reads(monkeypatch)
    keep = [a for a in tiny_config_args if a.startswith(("model.scratch.", "data.max_length", "data.cache_dir"))]
    args = keep + [f"output_dir={tmp_path / 'run'}", f"pretrain.corpus=[{corpus}]", "pretrain.objective=electra",
                   "train.evaluation.metric=replaced_f1", "data.train=null", "data.dev=null", "data.test=null",
                   "train.batch_size=8", "train.accumulate_steps=2", "train.max_steps=20", "train.runtime.log_every=10",
                   "train.checkpoints.keep=0", "train.optimizer.max_grad_norm=null",
                   "train.runtime.write_report=false"]
    assert main(["pretrain", "--config", DEMO, *overrides(args)]) == 0
    assert counts["reads"] == 20


def test_gpu_check_in_a_python_without_paddle_says_what_to_install_in_one_line(monkeypatch, capsys):
    """Issue 67: `make gpu-check` ran the system python3; where that had no paddle, the user met a
    ModuleNotFoundError traceback. The Makefile now takes the project's environment where there is one, and the
    script says in one line what to install."""
    import importlib.util
    import runpy

    from conftest import ROOT

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "paddle" else real(name, *a))
    monkeypatch.setattr(sys, "argv", ["tools/gpu_check.py"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(ROOT / "tools" / "gpu_check.py"), run_name="__main__")
    assert exited.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {sys.executable} has no paddle: gpu-check runs paddle_ft with Paddle's GPU build; "
                           "pip install '.[gpu]' --extra-index-url https://www.paddlepaddle.org.cn/packages/stable/cu126/")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "GPU_PYTHON ?= $(if $(wildcard $(PYTHON)),$(PYTHON),python3)" in makefile


def test_under_fp16_the_head_and_mean_pooling_run_in_float32_and_o2_keeps_them_and_the_embeddings(make_model,
                                                                                                  monkeypatch):
    """Issue 67: under fp16 O2 the prototype head's scale gradient and mean pooling reduced in float16 (Paddle's O2
    black list holds lookups, not these), and an untrimmed e5 embedding table was cast to float32 every forward.
    Now mean pooling sums in float32, the head runs in float32 outside the autocast, and decorate is told to keep the
    head and the embeddings float32. (On a CPU Paddle's autocast and decorate do nothing: their inputs are checked.)"""
    from paddle_ft.engine.amp import StepRunner

    model = make_model()
    model.pooling = "mean"
    sequence = paddle.to_tensor(np.full((2, 300, 32), 1.0 + 2 ** -9, dtype="float16"))  # fp16 sums drift at 300
    monkeypatch.setattr(type(model.encoder), "forward", lambda self, *a, **k: (sequence, None))
    ids = paddle.ones([2, 300], dtype="int64")
    pooled = model.embed(ids)
    assert pooled.dtype == paddle.float32
    np.testing.assert_allclose(pooled.numpy(), np.float32(1.0 + 2 ** -9), rtol=0, atol=1e-6)
    seen = []
    monkeypatch.setattr(paddle.amp, "is_autocast_enabled", lambda: True)
    monkeypatch.setattr(type(model.classifier), "forward", lambda self, x: seen.append(x.dtype) or x[:, :2])
    model(ids)
    assert seen == [paddle.float32]  # the head's input, under an autocast
    captured = {}
    monkeypatch.setattr(paddle.amp, "decorate", lambda **kwargs: captured.update(kwargs) or (kwargs["models"],
                                                                                           kwargs["optimizers"]))
    runner = StepRunner(AmpConfig(enabled=True, level="O2", dtype="float16"), 1.0)
    runner.prepare(model, paddle.optimizer.AdamW(parameters=model.parameters()))
    kept = captured["excluded_layers"]
    assert kept[0] is model.classifier
    assert {type(layer).__name__ for layer in kept[1:]} == {"Embedding"} and len(kept) == 4  # words, positions, types


@pytest.mark.gpu
def test_a_batch_copy_on_a_gpu_comes_from_pinned_memory_and_keeps_its_source_until_the_steps_read():
    from paddle_ft.engine import batch_copies

    paddle.set_device("gpu:0")
    array = np.arange(12, dtype=np.int64).reshape(3, 4)
    tensor = batch_copies.to_device(array)
    assert tensor.place.is_gpu_place() and len(batch_copies._in_flight) == 1
    assert batch_copies._in_flight[0].place.is_cuda_pinned_place()
    np.testing.assert_array_equal(tensor.numpy(), array)
    batch_copies.copies_done()
    assert batch_copies._in_flight == []
