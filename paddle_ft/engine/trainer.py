"""The training loop and evaluation. `train()` takes built objects; building from a config is in `cli`."""
from __future__ import annotations

import json
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
from paddle_ft.engine.checkpoint import rotate_checkpoints, save_checkpoint
from paddle_ft.engine.events import EventLog
from paddle_ft.engine.metrics import classification_report
from paddle_ft.engine.optim import build_optimizer
from paddle_ft.engine.plan import RunPlan, plan_run
from paddle_ft.model import MODEL_STATE


@dataclass
class Splits:
    train: Features
    dev: Features | None = None
    test: Features | None = None


def log(message: str) -> None:
    tqdm.write(message)  # keeps the progress bar intact


def train(model, splits: Splits, config: Config, output_dir: Path, label_names: tuple[str, ...],
          pad_token_id: int, save_best: Callable[[paddle.nn.Layer, Path], None]) -> dict:
    """Fine-tune `model`; writes metrics.jsonl, vdl/, checkpoints/, best/ and results.json."""
    tc = config.train
    plan = plan_run(len(splits.train), tc.batch_size, tc.accumulate_steps, tc.epochs, tc.max_steps, tc.warmup)
    log(f"plan: {plan.describe()}")
    optimizer, scheduler = build_optimizer(model, tc, plan.total_steps, plan.warmup_steps)
    runner = StepRunner(tc.amp, tc.max_grad_norm)
    model, optimizer = runner.prepare(model, optimizer)
    parameters = [p for p in model.parameters() if not p.stop_gradient]
    sampler = TrainBatchSampler(splits.train.lengths, tc.batch_size, config.seed, tc.group_by_length)
    events = EventLog(output_dir)
    events.write("plan", 0, **plan.as_dict())

    def evaluate_dev(global_step: int, epoch: int) -> float:
        report, _ = evaluate(model, splits.dev, tc.eval_batch_size, pad_token_id, label_names)
        events.write("eval", global_step, epoch=epoch, **report)
        log(f"eval step {global_step}: accuracy {report['accuracy']:.4f} macro_f1 {report['macro_f1']:.4f}")
        model.train()
        return report[tc.metric]

    global_step, best_metric, best_step, evals_since_best = 0, None, None, 0
    best_dir, checkpoints_dir = output_dir / "best", output_dir / "checkpoints"
    window = _Window()
    model.train()
    progress = tqdm(total=plan.total_steps, desc="train", unit="step", disable=None, dynamic_ncols=True)
    stop = False
    for epoch in range(plan.epochs):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        for start in range(0, len(batches), tc.accumulate_steps):
            group = batches[start:start + tc.accumulate_steps]
            group_examples = sum(len(b) for b in group)
            for indices in group:
                batch = pad_batch(splits.train, indices, pad_token_id)
                with runner.autocast():
                    logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]))
                # A sum over the group's examples divided by its size: k micro-batches of b are
                # exactly one batch of k*b, and a last, smaller group is averaged over its own size.
                loss = F.cross_entropy(logits.astype("float32"), paddle.to_tensor(batch["labels"]),
                                       reduction="sum") / group_examples
                runner.backward(loss)
                window.add(loss, len(indices), int((batch["input_ids"] != pad_token_id).sum()))
            lr = optimizer.get_lr()
            grad_norm = runner.step(optimizer, parameters)
            scheduler.step()
            window.end_step()
            global_step += 1
            progress.update(1)

            if global_step % tc.log_every == 0 or global_step == plan.total_steps:
                values = window.flush()
                values.update(epoch=epoch, lr=lr, loss_scale=runner.loss_scale,
                              skipped_steps=runner.skipped_steps,
                              grad_norm=float(grad_norm) if grad_norm is not None else None)
                events.write("train", global_step, **values)
                progress.set_postfix(loss=f"{values['loss']:.4f}", refresh=False)
                log(f"step {global_step}/{plan.total_steps} epoch {epoch + 1} loss {values['loss']:.4f} "
                    f"lr {lr:.3g} {values['samples_per_s']:.1f} samples/s")
            end_of_epoch = start + tc.accumulate_steps >= len(batches)
            stop = global_step >= plan.total_steps
            due = tc.eval_every and global_step % tc.eval_every == 0
            if due or end_of_epoch or stop:
                if splits.dev is not None:
                    metric = evaluate_dev(global_step, epoch)
                    if best_metric is None or metric > best_metric:
                        best_metric, best_step, evals_since_best = metric, global_step, 0
                        save_best(model, best_dir)
                    else:
                        evals_since_best += 1
                _checkpoint(checkpoints_dir, global_step, model, optimizer, scheduler, runner,
                            {"epoch": epoch, "best_metric": best_metric, "best_step": best_step}, tc.save_total_limit)
                if tc.early_stopping_patience and evals_since_best >= tc.early_stopping_patience:
                    log(f"early stopping: no {tc.metric} gain in {evals_since_best} evaluations")
                    stop = True
                window.restart_clock()  # evaluation and saving are not training throughput
            if stop:
                break
        if stop:
            break
    progress.close()
    if splits.dev is None:
        best_step = global_step
        save_best(model, best_dir)
    results = _final_results(model, splits, best_dir, best_step, tc.metric, tc.eval_batch_size, pad_token_id,
                             label_names, runner)
    events.write("results", global_step, **results)
    events.close()
    (output_dir / "results.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    return results


def _checkpoint(checkpoints_dir, global_step, model, optimizer, scheduler, runner, state, keep):
    state = {**state, "skipped_steps": runner.skipped_steps, "loss_scale": runner.loss_scale}
    save_checkpoint(checkpoints_dir, global_step, model, optimizer, scheduler, state)
    rotate_checkpoints(checkpoints_dir, keep)


def _final_results(model, splits, best_dir, best_step, metric, batch_size, pad_token_id, label_names,
                   runner) -> dict:
    """Metrics of the best model (reloaded from best/) on dev and test."""
    model.set_state_dict(paddle.load(str(best_dir / MODEL_STATE)))
    results = {"best_step": best_step, "metric": metric, "skipped_steps": runner.skipped_steps}
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


class _Window:
    """Loss and throughput since the last log line; the loss stays on device until then."""

    def __init__(self):
        self.loss_sum, self.steps = paddle.zeros([], dtype="float32"), 0
        self.restart_clock()

    def restart_clock(self):
        """Throughput counts only training time: called after each log line and each evaluation."""
        self.examples, self.tokens, self.started = 0, 0, time.perf_counter()

    def add(self, loss: paddle.Tensor, examples: int, tokens: int) -> None:
        self.loss_sum += loss.detach()  # summed over a step's micro-batches: that step's mean loss
        self.examples += examples
        self.tokens += tokens

    def end_step(self) -> None:
        self.steps += 1

    def flush(self) -> dict:
        seconds = max(time.perf_counter() - self.started, 1e-9)
        values = {"loss": float(self.loss_sum) / self.steps, "samples_per_s": self.examples / seconds,
                  "tokens_per_s": self.tokens / seconds}
        self.loss_sum, self.steps = paddle.zeros([], dtype="float32"), 0
        self.restart_clock()
        return values
