"""The training loop. `train()` takes built objects; building from a config is in `build`."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import signal
import time
from pathlib import Path
from typing import Callable

import numpy as np
import paddle
import paddle.nn.functional as F
from tqdm import tqdm

from paddle_ft.config import Config
from paddle_ft.data.features import Features, Splits, TrainBatchSampler, micro_batches, pad_batch
from paddle_ft.engine.amp import StepRunner
from paddle_ft.engine.checkpoint import (TrainState, capture_rng, complete_checkpoints, in_dtypes_of,
                                         load_checkpoint, rotate_checkpoints, save_checkpoint)
from paddle_ft.engine.distributed import Distributed
from paddle_ft.engine.evaluate import evaluate, predict_probabilities
from paddle_ft.engine.events import EventLog
from paddle_ft.engine.interrupt import StopRequests, TrainingInterrupted
from paddle_ft.engine.metrics import classification_report
from paddle_ft.engine.optim import build_optimizer
from paddle_ft.engine.plan import plan_run
from paddle_ft.errors import UserError
from paddle_ft.log import log
from paddle_ft.model import MODEL_STATE


class TrainingDiverged(UserError):
    """The loss stayed NaN/inf; training stopped instead of going on with garbage."""


def say(dist: Distributed, message: str) -> None:
    """Log once per job, from rank 0."""
    if dist.is_main:
        log(message)


def train(model, splits: Splits, config: Config, output_dir: Path, label_names: tuple[str, ...],
          pad_token_id: int, save_best: Callable[[paddle.nn.Layer, Path], None],
          resume_from: Path | None = None, resume_command: str = "", dist: Distributed = Distributed()) -> dict:
    """Fine-tune `model`; writes metrics.jsonl, vdl/, checkpoints/, best/ and results.json.

    With `resume_from`, every piece of state is restored from that checkpoint and training goes on
    exactly as if it had not stopped. `resume_command` is printed when a signal stops the run. Under
    `dist`, `batch_size` is per process and only rank 0 writes anything.
    """
    tc = config.train
    plan = plan_run(len(splits.train), tc.batch_size, tc.accumulate_steps, tc.epochs, tc.max_steps, tc.warmup,
                    dist.world_size)
    optimizer, scheduler = build_optimizer(model, tc, plan.total_steps, plan.warmup_steps)
    runner = StepRunner(tc.amp, tc.max_grad_norm)
    raw_model, optimizer = runner.prepare(model, optimizer)
    state = TrainState()
    if resume_from is not None:
        state = load_checkpoint(resume_from, raw_model, optimizer, scheduler, runner.scaler, dist.rank)
        runner.skipped_steps = state.skipped_steps
        say(dist, f"resumed from {resume_from}: step {state.global_step}, epoch {state.epoch + 1}, "
                  f"{state.epoch_steps_done} steps into it")
    # DataParallel all-reduces (averages) gradients in backward; it starts from rank 0's weights.
    model = paddle.DataParallel(raw_model) if dist.active else raw_model
    say(dist, f"plan: {plan.describe()}")
    events = EventLog(output_dir, keep_until_step=state.global_step if resume_from else None) \
        if dist.is_main else None
    if events and resume_from is None:
        events.write("plan", 0, **plan.as_dict())
    parameters = [p for p in raw_model.parameters() if not p.stop_gradient]
    # One shuffled order of step batches (all examples of one optimizer step), the same on every rank
    # thanks to the same seed; each rank takes its share of each micro-batch. Batching by step keeps
    # k micro-batches of b, or r ranks of b, exactly one batch of k*b (or r*b), grouping included.
    sampler = TrainBatchSampler(splits.train.lengths, plan.effective_batch_size, config.seed, tc.group_by_length)
    best_dir, checkpoints_dir = output_dir / "best", output_dir / "checkpoints"
    window = _Window(state.window_loss_sum, state.window_steps)

    def checkpoint() -> Path:
        state.skipped_steps = runner.skipped_steps
        state.window_loss_sum, state.window_steps = window.snapshot()
        rng_states = dist.gather(capture_rng())  # every rank's, so each resumes its own dropout stream
        path = checkpoints_dir / f"step-{state.global_step}"
        if dist.is_main:
            save_checkpoint(checkpoints_dir, raw_model, optimizer, scheduler, runner.scaler, state, rng_states)
            rotate_checkpoints(checkpoints_dir, tc.save_total_limit, protect_step=state.best_step)
        dist.barrier()  # nobody moves on (or exits) while rank 0 is still writing
        return path

    model.train()
    progress = tqdm(total=plan.total_steps, initial=state.global_step, desc="train", unit="step",
                    disable=None if dist.is_main else True, dynamic_ncols=True)
    stop = state.global_step >= plan.total_steps
    with StopRequests() as signals:
        while not stop and state.epoch < plan.epochs:
            sampler.set_epoch(state.epoch)
            step_batches = list(sampler)
            for step_in_epoch in range(state.epoch_steps_done, len(step_batches)):
                step_batch = step_batches[step_in_epoch]
                group, group_examples = micro_batches(step_batch, tc.batch_size, dist.rank, dist.world_size)
                epoch = state.epoch
                step_loss, tokens = _forward_backward(model, runner, splits.train, group, group_examples, pad_token_id,
                                                      dist.world_size)
                lr = optimizer.get_lr()
                # one host sync per step, so that no rank ever trains on NaN and all stop together
                nonfinite, stop_requested = dist.any(not math.isfinite(float(step_loss)), signals.signal is not None)
                finite = not nonfinite
                grad_norm = runner.step(optimizer, parameters) if finite else runner.skip(optimizer)
                scheduler.step()
                state.global_step += 1
                state.nonfinite_streak = 0 if finite else state.nonfinite_streak + 1
                window.add(step_loss if finite else None, group_examples, tokens)
                end_of_epoch = step_in_epoch + 1 == len(step_batches)
                state.epoch, state.epoch_steps_done = (epoch + 1, 0) if end_of_epoch else (epoch, step_in_epoch + 1)
                progress.update(1)

                if state.global_step % tc.log_every == 0 or state.global_step == plan.total_steps:
                    values = window.flush(dist)  # every rank joins the loss all-reduce
                    values.update(epoch=epoch, lr=lr, loss_scale=runner.loss_scale, skipped_steps=runner.skipped_steps,
                                  grad_norm=float(grad_norm) if grad_norm is not None else None)
                    if events:
                        events.write("train", state.global_step, **values)
                        log(f"step {state.global_step}/{plan.total_steps} loss {_fmt(values['loss'])} lr {lr:.3g} "
                            f"{values['samples_per_s']:.1f} samples/s")
                if state.nonfinite_streak >= tc.max_nonfinite_steps:
                    dist.barrier()
                    raise TrainingDiverged(_diverged_message(state, tc.max_nonfinite_steps, checkpoints_dir))
                stop = state.global_step >= plan.total_steps
                due_eval = (tc.eval_every and state.global_step % tc.eval_every == 0) or end_of_epoch or stop
                due_save = due_eval or (tc.save_every and state.global_step % tc.save_every == 0)
                if due_eval and splits.dev is not None:
                    metric = _evaluate_dev(raw_model, splits.dev, tc, pad_token_id, label_names, events, state, dist,
                                           runner.autocast)
                    if _track_best(state, metric):
                        if dist.is_main:
                            save_best(raw_model, best_dir)
                    elif tc.early_stopping_patience and state.evals_since_best >= tc.early_stopping_patience:
                        say(dist, f"early stopping: no {tc.metric} gain in {state.evals_since_best} evaluations")
                        stop = True
                if due_save or stop_requested:
                    path = checkpoint()
                    window.restart_clock()  # evaluation and saving are not training throughput
                if stop_requested:
                    progress.close()
                    if events:
                        events.close()
                    signum = signals.signal or signal.SIGTERM  # a rank that did not get it stops with the others
                    raise TrainingInterrupted(f"stopped by signal {signum} after step {state.global_step}; "
                                              f"saved {path}. Resume with: {resume_command}", signum)
                if stop:
                    break
    progress.close()
    _check_replicas_agree(raw_model, dist)
    if not dist.is_main:
        dist.barrier()  # rank 0 scores the best model alone; wait so the launcher sees one finished job
        return {}
    if splits.dev is None:
        state.best_step = state.global_step
        save_best(raw_model, best_dir)
    results = _final_results(raw_model, splits, best_dir, state, tc.metric, tc.eval_batch_size, pad_token_id,
                             label_names, runner)
    events.write("results", state.global_step, **results)
    events.close()
    (output_dir / "results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    dist.barrier()
    return results


def _forward_backward(model, runner: StepRunner, features: Features, group: list[list[int]], group_examples: int,
                      pad_token_id: int, world_size: int = 1):
    """Backward over this rank's share of one accumulation group of `group_examples` examples (all
    ranks together). Returns (this rank's part of the group's mean loss, (real, padded) tokens)."""
    step_loss, tokens, padded = None, 0, 0
    for i, indices in enumerate(group):
        batch = pad_batch(features, indices, pad_token_id)
        # gradients are all-reduced once per optimizer step, on its last micro-batch
        sync = contextlib.nullcontext() if i == len(group) - 1 or world_size == 1 else model.no_sync()
        with sync:
            with runner.autocast():
                logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
            # A sum over the examples divided by the group's size: k micro-batches of b are exactly one
            # batch of k*b, and a last, smaller group is averaged over its own size. DataParallel
            # averages over ranks, hence the factor world_size.
            loss = F.cross_entropy(logits.astype("float32"), paddle.to_tensor(batch["labels"]),
                                   reduction="sum") * (world_size / group_examples)
            runner.backward(loss)
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        tokens += int((batch["input_ids"] != pad_token_id).sum())
        padded += batch["input_ids"].size
    return step_loss, (tokens, padded)


def _evaluate_dev(model, dev: Features, tc, pad_token_id, label_names, events, state: TrainState,
                  dist: Distributed, autocast):
    """Each rank scores every world_size-th dev example; the gathered predictions cover each example
    exactly once, so every rank computes the same metrics. `autocast` is training's: an O2 model run
    outside it would compute in pure float16, without Paddle's list of ops kept in float32."""
    mine = np.arange(dist.rank, len(dev), dist.world_size)
    probs = np.zeros((len(dev), len(label_names)), dtype=np.float32)
    for indices, part in dist.gather((mine, predict_probabilities(model, dev, tc.eval_batch_size, pad_token_id,
                                                                  mine, autocast))):
        probs[indices] = part
    report = classification_report(dev.labels, probs.argmax(axis=1), label_names)
    if events:
        events.write("eval", state.global_step, **report)
    say(dist, f"eval step {state.global_step}: accuracy {report['accuracy']:.4f} macro_f1 {report['macro_f1']:.4f}")
    model.train()
    return report[tc.metric]


def _track_best(state: TrainState, metric: float) -> bool:
    """Record an evaluation; True when it is the best so far (the first of equal scores wins)."""
    if state.best_metric is None or metric > state.best_metric:
        state.best_metric, state.best_step, state.evals_since_best = metric, state.global_step, 0
        return True
    state.evals_since_best += 1
    return False


def _check_replicas_agree(model, dist: Distributed) -> None:
    """Data parallel must leave the same weights on every rank; a mismatch is a bug, not a user error."""
    if not dist.active:
        return
    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(np.ascontiguousarray(parameter.numpy()).tobytes())
    fingerprints = dist.gather(digest.hexdigest())  # bit-for-bit identity, without shipping the weights
    if any(f != fingerprints[0] for f in fingerprints):
        raise RuntimeError("data-parallel replicas ended with different weights")
    say(dist, f"weights identical on all {dist.world_size} ranks")


def _diverged_message(state: TrainState, limit: int, checkpoints_dir: Path) -> str:
    good = complete_checkpoints(checkpoints_dir)  # empty when the folder does not exist yet
    last = f"last good checkpoint: {good[-1]}" if good else "no checkpoint was saved yet"
    return (f"the loss was NaN/inf for {limit} steps in a row (steps {state.global_step - limit + 1}-"
            f"{state.global_step}); {last}. Lower train.learning_rate or check the data, then resume "
            "with -o train.resume=PATH")


def _final_results(model, splits, best_dir, state: TrainState, metric, batch_size, pad_token_id, label_names,
                   runner) -> dict:
    """Metrics of the best model (reloaded from best/) on dev and test."""
    # float32 on disk; the model may be float16 (O2)
    model.set_state_dict(in_dtypes_of(model, paddle.load(str(best_dir / MODEL_STATE))))
    results = {"best_step": state.best_step, "metric": metric, "skipped_steps": runner.skipped_steps}
    for name in ("dev", "test"):
        features = getattr(splits, name)
        if features is not None:
            results[name], _ = evaluate(model, features, batch_size, pad_token_id, label_names, runner.autocast)
    return results


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


class _Window:
    """Loss and throughput since the last log line; the loss stays on device until then."""

    def __init__(self, loss_sum: float = 0.0, steps: int = 0):
        self.loss_sum, self.steps = paddle.full([], loss_sum, dtype="float32"), steps
        self.restart_clock()

    def restart_clock(self):
        """Throughput counts only training time: called after each log line and each save."""
        self.examples, self.tokens, self.padded_tokens, self.started = 0, 0, 0, time.perf_counter()

    def add(self, step_loss: paddle.Tensor | None, examples: int, tokens: tuple[int, int]) -> None:
        if step_loss is not None:  # a non-finite step is counted in skipped_steps, not averaged in
            self.loss_sum += step_loss
            self.steps += 1
        self.examples += examples
        self.tokens += tokens[0]
        self.padded_tokens += tokens[1]

    def snapshot(self) -> tuple[float, int]:
        return float(self.loss_sum), self.steps

    def flush(self, dist: Distributed) -> dict:
        """Mean loss of the window over all ranks; samples/s of the whole job, real and padded
        (real + pad) tokens/s of this rank."""
        seconds = max(time.perf_counter() - self.started, 1e-9)
        loss_sum = dist.mean(self.loss_sum)
        values = {"loss": float(loss_sum) / self.steps if self.steps else None,
                  "samples_per_s": self.examples / seconds, "tokens_per_s": self.tokens / seconds,
                  "padded_tokens_per_s": self.padded_tokens / seconds}
        self.loss_sum, self.steps = paddle.zeros([], dtype="float32"), 0
        self.restart_clock()
        return values
