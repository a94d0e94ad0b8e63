import json

import numpy as np
import paddle
import pytest
from conftest import LABELS, count_tensor_reads, features_of, synthetic_rows, tiny_meta

from paddle_ft.artifacts.bundle import MODEL_STATE
from paddle_ft.config import AmpConfig, load_config
from paddle_ft.data.features import Splits
from paddle_ft.engine.amp import StepRunner
from paddle_ft.engine.run_folder import RunFolder
from paddle_ft.engine.trainer import train


def run_training(model, tokenizer, out, overrides, dev=True, resume_from=None):
    config = load_config(None, ["model.scratch.vocab_file=unused", "train.optimizer.warmup=0",
                                "train.optimizer.learning_rate=1e-3", "train.runtime.log_every=1",
                                f"data.dev={'dev.tsv' if dev else None}", *overrides])
    splits = Splits(LABELS, tokenizer.pad_token_id, features_of(synthetic_rows(64, seed=1), tokenizer),
                    features_of(synthetic_rows(16, seed=2), tokenizer) if dev else None)
    out.mkdir(parents=True, exist_ok=resume_from is not None)
    run = RunFolder(out).with_classifier(tokenizer, tiny_meta(dropout=0.1))
    results = train(model, splits, config, run, resume_from=resume_from)
    return results, {k: v.numpy() for k, v in model.state_dict().items()}


def train_events(out):
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "train"]


def test_same_seed_gives_identical_weights(make_model, tokenizer, tmp_path):
    args = ["train.max_steps=4", "train.batch_size=8", "seed=3"]
    _, first = run_training(make_model(seed=3, dropout=0.1), tokenizer, tmp_path / "a", args, dev=False)
    _, second = run_training(make_model(seed=3, dropout=0.1), tokenizer, tmp_path / "b", args, dev=False)
    assert all(np.array_equal(first[k], second[k]) for k in first)
    _, other = run_training(make_model(seed=4, dropout=0.1), tokenizer, tmp_path / "c", args, dev=False)
    assert not all(np.array_equal(first[k], other[k]) for k in first)


def test_accumulation_equals_the_big_batch(make_model, tokenizer, tmp_path):
    # 64 examples: 8 steps of 8, and the same 8 steps as 2 micro-batches of 4
    common = ["train.max_steps=8", "data.group_by_length=false", "train.optimizer.max_grad_norm=null"]
    _, big = run_training(make_model(), tokenizer, tmp_path / "big", common + ["train.batch_size=8"], dev=False)
    _, accumulated = run_training(make_model(), tokenizer, tmp_path / "acc",
                                  common + ["train.batch_size=4", "train.accumulate_steps=2"], dev=False)
    worst = max(np.abs(big[k] - accumulated[k]).max() for k in big)
    assert worst < 1e-5
    assert [e["loss"] for e in train_events(tmp_path / "big")] == pytest.approx(
        [e["loss"] for e in train_events(tmp_path / "acc")], abs=1e-5)


def test_each_log_line_splits_a_step_into_the_hosts_work_and_its_wait_in_the_steps_read(make_model, tokenizer,
                                                                                         tmp_path, monkeypatch):
    """Issue 67: on a GPU the host queues a step's work and waits for it in the step's one read; how a step splits
    tells a host-bound run from a GPU-bound one. Here the read is made 30 ms slow: it is the wait, and the two parts
    are within the step's time."""
    import time

    from paddle_ft.engine.distributed import Distributed

    read = Distributed.step_totals

    def slow_read(self, loss, stop):
        time.sleep(0.03)
        return read(self, loss, stop)

    monkeypatch.setattr(Distributed, "step_totals", slow_read)
    run_training(make_model(), tokenizer, tmp_path / "o", ["train.max_steps=4", "train.batch_size=8"], dev=False)
    for event in train_events(tmp_path / "o"):
        step_ms = 1000 * 8 / event["samples_per_s"]  # one step a log line: its whole time, logging included
        assert event["waiting_ms_per_step"] >= 30 and event["host_ms_per_step"] > 0
        assert event["host_ms_per_step"] + event["waiting_ms_per_step"] <= step_ms


def test_partial_last_group_still_steps(make_model, tokenizer, tmp_path):
    # 64 examples in micro-batches of 12: 6 micro-batches (the last has 4) -> groups of 4 and 2
    run_training(make_model(), tokenizer, tmp_path / "o", ["train.epochs=1", "train.batch_size=12",
                                                            "train.accumulate_steps=4"], dev=False)
    assert [e["step"] for e in train_events(tmp_path / "o")] == [1, 2]


def loss_and_backward(model, tokenizer, runner=None, scale=1.0):
    batch = features_of(synthetic_rows(8), tokenizer)
    from paddle_ft.data.features import pad_batch

    padded = pad_batch(batch, list(range(8)), tokenizer.pad_token_id)
    with (runner.autocast() if runner else paddle.amp.auto_cast(enable=False)):
        logits = model(paddle.to_tensor(padded["input_ids"]), paddle.to_tensor(padded["token_type_ids"]))
    loss = paddle.nn.functional.cross_entropy(logits.astype("float32"), paddle.to_tensor(padded["labels"])) * scale
    if runner:
        runner.backward(loss)
    else:
        loss.backward()
    return logits, loss


def grads_norm(model):
    return float(np.sqrt(sum((p.grad.numpy().astype(np.float64) ** 2).sum() for p in model.parameters()
                             if p.grad is not None)))


def test_clipping_brings_the_global_norm_to_the_threshold(make_model, tokenizer):
    model = make_model()
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters())
    runner = StepRunner(AmpConfig(), max_grad_norm=0.05)
    loss_and_backward(model, tokenizer, runner, scale=100.0)
    before = grads_norm(model)
    reported = float(runner.unscale_and_clip(optimizer, model.parameters()))
    assert before > 0.05
    assert reported == pytest.approx(before, rel=1e-5)
    assert grads_norm(model) == pytest.approx(0.05, rel=1e-4)


def test_bf16_autocast_runs_on_cpu_and_stays_close_to_fp32(make_model, tokenizer):
    model = make_model()
    model.eval()
    fp32_logits, _ = loss_and_backward(model, tokenizer)
    runner = StepRunner(AmpConfig(enabled=True, dtype="bfloat16", level="O1"), max_grad_norm=1.0)
    bf16_logits, loss = loss_and_backward(model, tokenizer, runner)
    assert not runner.scaler.is_enable()  # bfloat16 needs no loss scaling
    assert np.isfinite(float(loss))
    assert np.abs(bf16_logits.astype("float32").numpy() - fp32_logits.numpy()).max() < 2e-2


def test_dropping_the_gradients_after_a_step_trains_exactly_as_zero_filling_them(make_model, tokenizer):
    """The runner on CPU drops the gradients after a step (drop_grads): two steps of two accumulated micro-batches
    each leave the same weights, bit for bit, as Paddle's default zero fill."""
    weights, grads_after_step = {}, {}
    for drop in (False, True):
        model = make_model(seed=5)
        optimizer = paddle.optimizer.AdamW(parameters=model.parameters(), learning_rate=1e-2)
        runner = StepRunner(AmpConfig(), max_grad_norm=1.0, drop_grads=drop)
        for _ in range(2):
            loss_and_backward(model, tokenizer, runner)
            loss_and_backward(model, tokenizer, runner, scale=0.5)
            runner.step(optimizer, model.parameters())
        weights[drop] = {k: v.numpy() for k, v in model.state_dict().items()}
        grads_after_step[drop] = {p.grad is None for p in model.parameters()}
    assert all(np.array_equal(weights[False][k], weights[True][k]) for k in weights[False])
    assert grads_after_step == {False: {False}, True: {True}}


@pytest.fixture
def scaler_on_cpu(monkeypatch):
    """Paddle switches GradScaler off unless the device is a GPU/XPU; its kernels run on CPU, so let
    it believe it is on a GPU while it is built, to exercise the real float16 scaling path here."""
    import types

    import paddle.amp.grad_scaler as grad_scaler

    gpu = types.SimpleNamespace(_expected_place=types.SimpleNamespace(is_gpu_place=lambda: True))
    monkeypatch.setattr(grad_scaler, "_dygraph_tracer", lambda: gpu)
    yield
    monkeypatch.undo()


def test_float16_scaler_skips_and_counts_overflowing_steps(make_model, tokenizer, scaler_on_cpu):
    model = make_model()
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters(), learning_rate=1e-2)
    runner = StepRunner(AmpConfig(enabled=True, dtype="float16", init_loss_scaling=1024), max_grad_norm=1.0)
    assert runner.scaler.is_enable() and runner.loss_scale == 1024
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    loss_and_backward(model, tokenizer, runner, scale=float("inf"))  # overflowing gradients
    assert runner.step(optimizer, model.parameters())[1] is True  # skipped
    assert all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())
    assert runner.loss_scale == 512  # dynamic scaling halves the scale after an overflow
    loss_and_backward(model, tokenizer, runner)
    assert runner.step(optimizer, model.parameters())[1] is False
    assert not all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())


def test_a_float16_step_reads_the_overflow_flag_on_the_host_once(make_model, tokenizer, scaler_on_cpu, monkeypatch):
    """Issue 46: the runner read the flag itself, then Paddle's optimizer read it again to decide the skip. Now the
    one read of a healthy step is Paddle's (its eager optimizer cannot skip without it); an overflowing step adds the
    two of Paddle's own message about the smaller scale."""
    model = make_model()
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters(), learning_rate=1e-2)
    runner = StepRunner(AmpConfig(enabled=True, dtype="float16", init_loss_scaling=1024), max_grad_norm=None)
    counts = count_tensor_reads(monkeypatch)
    for scale, overflowed, reads in ((float("inf"), True, 3), (1.0, False, 1)):
        loss_and_backward(model, tokenizer, runner, scale=scale)
        counts["on"], counts["reads"] = True, 0
        assert runner.step(optimizer, model.parameters())[1] is overflowed
        counts["on"] = False
        assert counts["reads"] == reads


def test_training_writes_best_results_and_rotates_checkpoints(make_model, tokenizer, tmp_path):
    out = tmp_path / "run"
    results, _ = run_training(make_model(), tokenizer, out, ["train.epochs=3", "train.batch_size=16",
                                                             "train.evaluation.every=2", "train.checkpoints.keep=2"])
    assert (out / "best" / MODEL_STATE).is_file() and (out / "vdl").is_dir()
    assert json.loads((out / "results.json").read_text())["dev"]["examples"] == 16
    evals = [e for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [2, 4, 6, 8, 10, 12]
    best = max(evals, key=lambda e: e["accuracy"])  # the first of equals, as training keeps the first
    assert results.best_step == best["step"]
    # the newest train.checkpoints.keep checkpoints, plus the best one
    kept = {"step-10", "step-12", f"step-{best['step']}"}
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == sorted(kept)
    assert results.dev["accuracy"] == pytest.approx(best["accuracy"])


def test_early_stopping_stops_after_patience(make_model, tokenizer, tmp_path):
    out = tmp_path / "run"
    # lr 0 cannot improve the dev metric after the first evaluation
    run_training(make_model(), tokenizer, out, ["train.epochs=5", "train.batch_size=16", "train.evaluation.every=1",
                                                "train.evaluation.early_stopping_patience=2",
                                                "train.optimizer.learning_rate=1e-12"])
    evals = [e for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [1, 2, 3]


@pytest.mark.parametrize("tuned", [False, True], ids=["plain", "frozen-layer-and-layer-rates"])
def test_a_run_stopped_by_a_signal_resumes_in_process_to_the_same_weights(tuned, make_model, tokenizer, tmp_path,
                                                                          monkeypatch):
    import signal

    from paddle_ft.workflows.build import freeze
    from paddle_ft.engine import trainer
    from paddle_ft.engine.interrupt import TrainingInterrupted

    args = ["train.max_steps=10", "train.batch_size=8", "train.checkpoints.every=4", "seed=3"]
    if tuned:  # parameter groups of three rates and a frozen layer: optimizer state that must resume too
        args += ["train.optimizer.layer_lr_decay=0.8", "train.optimizer.head_learning_rate=1e-2"]

    def model(seed):
        built = make_model(seed=seed, dropout=0.1)
        if tuned:
            freeze(built, embeddings=False, layers=1)
        return built

    _, whole = run_training(model(3), tokenizer, tmp_path / "whole", args, dev=False)
    real, calls = trainer._forward_backward, []

    def signalled_at_step_6(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            signal.raise_signal(signal.SIGTERM)  # handled by the loop: finish the step, save, stop
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "_forward_backward", signalled_at_step_6)
    with pytest.raises(TrainingInterrupted) as stopped:
        run_training(model(3), tokenizer, tmp_path / "broken", args, dev=False)
    assert (stopped.value.step, stopped.value.exit_code) == (6, 128 + signal.SIGTERM)
    assert stopped.value.checkpoint == tmp_path / "broken" / "checkpoints" / "step-6"
    monkeypatch.setattr(trainer, "_forward_backward", real)
    # another initialisation on purpose: everything must come from the checkpoint
    _, resumed = run_training(model(8), tokenizer, tmp_path / "broken", args, dev=False,
                              resume_from=stopped.value.checkpoint)
    assert all(np.array_equal(whole[k], resumed[k]) for k in whole)
    assert [(e["step"], e["loss"]) for e in train_events(tmp_path / "whole")] == \
        [(e["step"], e["loss"]) for e in train_events(tmp_path / "broken")]


def test_the_best_model_is_scored_on_dev_once(make_model, tokenizer, tmp_path, monkeypatch):
    """The final scoring takes dev's report from the best evaluation instead of scoring dev a second time."""
    from paddle_ft.engine.objectives.classification import Classification

    scored_sizes = []
    score = Classification.score

    def counted(self, model, features, subset, batch_size, autocast):
        scored_sizes.append(len(subset))
        return score(self, model, features, subset, batch_size, autocast)

    monkeypatch.setattr(Classification, "score", counted)
    out = tmp_path / "run"
    results, _ = run_training(make_model(), tokenizer, out, ["train.epochs=2", "train.batch_size=16"])
    evals = [e for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if e["event"] == "eval"]
    assert scored_sizes == [16] * len(evals)  # the evaluations, and no final pass over dev
    best = next(e for e in evals if e["step"] == results.best_step)
    assert results.dev["accuracy"] == best["accuracy"] and results.dev["examples"] == 16
