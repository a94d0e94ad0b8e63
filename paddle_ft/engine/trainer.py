"""The training loop and evaluation. `train()` takes built objects; building from a config is in `cli`."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import paddle
import paddle.nn.functional as F
from tqdm import tqdm

from paddle_ft.config import Config
from paddle_ft.data.features import Features, TrainBatchSampler, eval_batches, pad_batch
from paddle_ft.engine.amp import StepRunner
from paddle_ft.engine.checkpoint import TrainState, load_checkpoint, rotate_checkpoints, save_checkpoint
from paddle_ft.engine.events import EventLog
from paddle_ft.engine.interrupt import StopRequests, TrainingInterrupted
from paddle_ft.engine.metrics import classification_report
from paddle_ft.engine.optim import build_optimizer
from paddle_ft.engine.plan import plan_run
from paddle_ft.errors import UserError
from paddle_ft.model import MODEL_STATE


@dataclass
class Splits:
    train: Features
    dev: Features | None = None
    test: Features | None = None


class TrainingDiverged(UserError):
    """The loss stayed NaN/inf; training stopped instead of going on with garbage."""


def log(message: str) -> None:
    tqdm.write(message)  # keeps the progress bar intact


def train(model, splits: Splits, config: Config, output_dir: Path, label_names: tuple[str, ...],
          pad_token_id: int, save_best: Callable[[paddle.nn.Layer, Path], None],
          resume_from: Path | None = None, resume_command: str = "") -> dict:
    """Fine-tune `model`; writes metrics.jsonl, vdl/, checkpoints/, best/ and results.json.

    With `resume_from`, every piece of state is restored from that checkpoint and training goes on
    exactly as if it had not stopped. `resume_command` is printed when a signal stops the run.
    """
    tc = config.train
    plan = plan_run(len(splits.train), tc.batch_size, tc.accumulate_steps, tc.epochs, tc.max_steps, tc.warmup)
    optimizer, scheduler = build_optimizer(model, tc, plan.total_steps, plan.warmup_steps)
    runner = StepRunner(tc.amp, tc.max_grad_norm)
    model, optimizer = runner.prepare(model, optimizer)
    state = TrainState()
    if resume_from is not None:
        state = load_checkpoint(resume_from, model, optimizer, scheduler, runner.scaler)
        runner.skipped_steps = state.skipped_steps
        log(f"resumed from {resume_from}: step {state.global_step}, epoch {state.epoch + 1}, "
            f"{state.batches_done} batches into it")
    log(f"plan: {plan.describe()}")
    events = EventLog(output_dir, keep_until_step=state.global_step if resume_from else None)
    if resume_from is None:
        events.write("plan", 0, **plan.as_dict())
    parameters = [p for p in model.parameters() if not p.stop_gradient]
    sampler = TrainBatchSampler(splits.train.lengths, tc.batch_size, config.seed, tc.group_by_length)
    best_dir, checkpoints_dir = output_dir / "best", output_dir / "checkpoints"
    window = _Window(state.window_loss_sum, state.window_steps)

    def checkpoint() -> Path:
        state.skipped_steps = runner.skipped_steps
        state.window_loss_sum, state.window_steps = window.snapshot()
        path = save_checkpoint(checkpoints_dir, model, optimizer, scheduler, runner.scaler, state)
        rotate_checkpoints(checkpoints_dir, tc.save_total_limit, protect_step=state.best_step)
        return path

    model.train()
    progress = tqdm(total=plan.total_steps, initial=state.global_step, desc="train", unit="step", disable=None,
                    dynamic_ncols=True)
    stop = state.global_step >= plan.total_steps
    with StopRequests() as signals:
        while not stop and state.epoch < plan.epochs:
            sampler.set_epoch(state.epoch)
            batches = list(sampler)
            for start in range(state.batches_done, len(batches), tc.accumulate_steps):
                group = batches[start:start + tc.accumulate_steps]
                epoch = state.epoch
                step_loss, examples, tokens = _forward_backward(model, runner, splits.train, group, pad_token_id)
                lr = optimizer.get_lr()
                finite = math.isfinite(float(step_loss))  # one host sync per step, to never train on NaN
                grad_norm = runner.step(optimizer, parameters) if finite else runner.skip(optimizer)
                scheduler.step()
                state.global_step += 1
                state.nonfinite_streak = 0 if finite else state.nonfinite_streak + 1
                window.add(step_loss if finite else None, examples, tokens)
                end_of_epoch = start + tc.accumulate_steps >= len(batches)
                state.epoch, state.batches_done = (state.epoch + 1, 0) if end_of_epoch else (
                    state.epoch, start + len(group))
                progress.update(1)

                if state.global_step % tc.log_every == 0 or state.global_step == plan.total_steps:
                    values = window.flush()
                    values.update(epoch=epoch, lr=lr,
                                  loss_scale=runner.loss_scale, skipped_steps=runner.skipped_steps,
                                  grad_norm=float(grad_norm) if grad_norm is not None else None)
                    events.write("train", state.global_step, **values)
                    log(f"step {state.global_step}/{plan.total_steps} loss {_fmt(values['loss'])} lr {lr:.3g} "
                        f"{values['samples_per_s']:.1f} samples/s")
                if state.nonfinite_streak >= tc.max_nonfinite_steps:
                    raise TrainingDiverged(_diverged_message(state, tc.max_nonfinite_steps, checkpoints_dir))
                stop = state.global_step >= plan.total_steps
                due_eval = (tc.eval_every and state.global_step % tc.eval_every == 0) or end_of_epoch or stop
                due_save = due_eval or (tc.save_every and state.global_step % tc.save_every == 0)
                if due_eval and splits.dev is not None:
                    metric = _evaluate_dev(model, splits.dev, tc, pad_token_id, label_names, events, state)
                    if state.best_metric is None or metric > state.best_metric:
                        state.best_metric, state.best_step, state.evals_since_best = metric, state.global_step, 0
                        save_best(model, best_dir)
                    else:
                        state.evals_since_best += 1
                    if tc.early_stopping_patience and state.evals_since_best >= tc.early_stopping_patience:
                        log(f"early stopping: no {tc.metric} gain in {state.evals_since_best} evaluations")
                        stop = True
                if due_save or signals.signal is not None:
                    path = checkpoint()
                    window.restart_clock()  # evaluation and saving are not training throughput
                if signals.signal is not None:
                    progress.close()
                    events.close()
                    raise TrainingInterrupted(f"stopped by signal {signals.signal} after step {state.global_step}; "
                                              f"saved {path}. Resume with: {resume_command}", signals.signal)
                if stop:
                    break
    progress.close()
    if splits.dev is None:
        state.best_step = state.global_step
        save_best(model, best_dir)
    results = _final_results(model, splits, best_dir, state, tc.metric, tc.eval_batch_size, pad_token_id,
                             label_names, runner)
    events.write("results", state.global_step, **results)
    events.close()
    (output_dir / "results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    return results


def _forward_backward(model, runner: StepRunner, features: Features, group: list[list[int]], pad_token_id: int):
    """Backward over one accumulation group; returns (the group's mean loss, examples, real tokens)."""
    group_examples = sum(len(b) for b in group)
    step_loss, tokens = None, 0
    for indices in group:
        batch = pad_batch(features, indices, pad_token_id)
        with runner.autocast():
            logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
        # A sum over the group's examples divided by its size: k micro-batches of b are exactly
        # one batch of k*b, and a last, smaller group is averaged over its own size.
        loss = F.cross_entropy(logits.astype("float32"), paddle.to_tensor(batch["labels"]),
                               reduction="sum") / group_examples
        runner.backward(loss)
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        tokens += int((batch["input_ids"] != pad_token_id).sum())
    return step_loss, group_examples, tokens


def _evaluate_dev(model, dev: Features, tc, pad_token_id, label_names, events: EventLog, state: TrainState):
    report, _ = evaluate(model, dev, tc.eval_batch_size, pad_token_id, label_names)
    events.write("eval", state.global_step, **report)
    log(f"eval step {state.global_step}: accuracy {report['accuracy']:.4f} macro_f1 {report['macro_f1']:.4f}")
    model.train()
    return report[tc.metric]


def _diverged_message(state: TrainState, limit: int, checkpoints_dir: Path) -> str:
    from paddle_ft.engine.checkpoint import complete_checkpoints

    good = complete_checkpoints(checkpoints_dir) if checkpoints_dir.is_dir() else []
    last = f"last good checkpoint: {good[-1]}" if good else "no checkpoint was saved yet"
    return (f"the loss was NaN/inf for {limit} steps in a row (steps {state.global_step - limit + 1}-"
            f"{state.global_step}); {last}. Lower train.learning_rate or check the data, then resume "
            "with -o train.resume=PATH")


def _final_results(model, splits, best_dir, state: TrainState, metric, batch_size, pad_token_id, label_names,
                   runner) -> dict:
    """Metrics of the best model (reloaded from best/) on dev and test."""
    model.set_state_dict(paddle.load(str(best_dir / MODEL_STATE)))
    results = {"best_step": state.best_step, "metric": metric, "skipped_steps": runner.skipped_steps}
    for name in ("dev", "test"):
        features = getattr(splits, name)
        if features is not None:
            results[name], _ = evaluate(model, features, batch_size, pad_token_id, label_names)
    return results


@paddle.no_grad()
def predict_probabilities(model, features: Features, batch_size: int, pad_token_id: int) -> np.ndarray:
    """Softmax probabilities [n, num_classes] in the order of `features`."""
    model.eval()
    out = None
    for indices in eval_batches(features.lengths, batch_size):
        batch = pad_batch(features, indices, pad_token_id)
        logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
        probs = F.softmax(logits.astype("float32"), axis=-1).numpy()  # [batch, num_classes]
        if out is None:
            out = np.zeros((len(features), probs.shape[1]), dtype=np.float32)
        out[indices] = probs
    return out


def evaluate(model, features: Features, batch_size: int, pad_token_id: int,
             label_names: tuple[str, ...]) -> tuple[dict, np.ndarray]:
    """(classification report, probabilities) of `model` on labelled `features`."""
    probs = predict_probabilities(model, features, batch_size, pad_token_id)
    return classification_report(features.labels, probs.argmax(axis=1), label_names), probs


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


class _Window:
    """Loss and throughput since the last log line; the loss stays on device until then."""

    def __init__(self, loss_sum: float = 0.0, steps: int = 0):
        self.loss_sum, self.steps = paddle.full([], loss_sum, dtype="float32"), steps
        self.restart_clock()

    def restart_clock(self):
        """Throughput counts only training time: called after each log line and each save."""
        self.examples, self.tokens, self.started = 0, 0, time.perf_counter()

    def add(self, step_loss: paddle.Tensor | None, examples: int, tokens: int) -> None:
        if step_loss is not None:  # a non-finite step is counted in skipped_steps, not averaged in
            self.loss_sum += step_loss
            self.steps += 1
        self.examples += examples
        self.tokens += tokens

    def snapshot(self) -> tuple[float, int]:
        return float(self.loss_sum), self.steps

    def flush(self) -> dict:
        seconds = max(time.perf_counter() - self.started, 1e-9)
        values = {"loss": float(self.loss_sum) / self.steps if self.steps else None,
                  "samples_per_s": self.examples / seconds, "tokens_per_s": self.tokens / seconds}
        self.loss_sum, self.steps = paddle.zeros([], dtype="float32"), 0
        self.restart_clock()
        return values
