"""The training loop. `train()` takes built objects; building them from a config is `build`'s job."""
from __future__ import annotations

import contextlib
import hashlib
import math
import signal
import time
from pathlib import Path

import numpy as np
import paddle
from tqdm import tqdm

from paddle_ft.artifacts.run import Results
from paddle_ft.config import Config, EvaluationConfig
from paddle_ft.data.features import Features, Splits
from paddle_ft.engine.amp import StepRunner
from paddle_ft.engine.batch_copies import copies_done
from paddle_ft.engine.batching import TrainBatchSampler, micro_batches
from paddle_ft.engine.checkpoint import TrainState, capture_rng, complete_checkpoints, rotate_checkpoints
from paddle_ft.engine.distributed import Distributed
from paddle_ft.engine.eta import StepWork, TrainingEta
from paddle_ft.engine.interrupt import StopRequests, TrainingInterrupted
from paddle_ft.engine.objectives.classification import Classification
from paddle_ft.engine.optim import Optimization
from paddle_ft.engine.plan import RunPlan, plan_run
from paddle_ft.engine.run_folder import RunFolder
from paddle_ft.errors import UserError
from paddle_ft.log import log

FIRST_ETA_STEP = 10  # a first ETA before the first log line, which at e5-small's size and log_every 50 is a minute in


class TrainingDiverged(UserError):
    """The loss stayed NaN/inf; training stopped instead of going on with garbage."""


def say(dist: Distributed, message: str) -> None:
    """Log once per job, from rank 0."""
    if dist.is_main:
        log(message)


def train(model, splits: Splits, config: Config, run: RunFolder, dist: Distributed = Distributed(),
          resume_from: Path | None = None, objective=None, on_eval=None) -> Results | None:
    """Train `model` on `objective` (default: a classifier's); writes the run's events, checkpoints, best
    model and results into `run` (the `Results`, on rank 0; None on the others). With `resume_from`, every piece
    of state is restored from that checkpoint and training goes on exactly as if it had not stopped. Under `dist`,
    `batch_size` is per process, only rank 0 writes, and every collective is called by every rank (here, or in a
    helper called unconditionally). `on_eval(step, dev metric)` is called after each dev evaluation (a sweep prunes a
    trial by raising there)."""
    tc = config.train
    objective = objective or Classification(splits.label_names, splits.pad_token_id)
    plan, sampler = schedule(splits, config, dist)
    opt = Optimization.build(model, tc, plan)
    state = _start(opt, plan, resume_from, dist)
    # DataParallel all-reduces (averages) gradients in backward; it starts from rank 0's weights
    stepped = paddle.DataParallel(opt.model) if dist.active else opt.model
    speed = Throughput(packed=tc.runtime.packed_batches)
    with contextlib.ExitStack() as closing:  # every way out, an exception included, closes the log and the bar
        events = closing.enter_context(run.event_log(state.global_step if resume_from else None)) \
            if dist.is_main else None
        if events and resume_from is None:
            events.write("plan", 0, **plan.as_dict())
        progress = closing.enter_context(tqdm(total=plan.total_steps, initial=state.global_step, desc="train",
                                              unit="step", disable=None if dist.is_main else True, dynamic_ncols=True))
        signals = closing.enter_context(StopRequests())
        eta = TrainingEta(planned_work(plan, sampler, splits, config, dist), state.global_step)
        saved, memory = None, GpuMemory()
        best_dev = None  # the best evaluation's report: the final scoring does not score dev again
        stepped.train()
        for step_batch, end_of_epoch in _steps_left(sampler, state, plan):
            step_started, lr = time.perf_counter(), opt.learning_rate
            local_loss = _forward_backward(stepped, opt.runner, objective, splits.train, step_batch, state.global_step,
                                           tc.batch_size, dist, speed, reducer=tc.accumulate_steps == 1)
            issued = time.perf_counter()
            # the step's one collective and one host read: every rank sees the same loss and takes the same
            # decisions (a rank's non-finite loss makes the sum non-finite)
            loss_sum, stop_asked = dist.step_totals(local_loss, signals.signal is not None)
            read = time.perf_counter()
            copies_done()  # that read waited for the step's work, its batches' copies first
            nonfinite = not math.isfinite(loss_sum)
            grad_norm, skipped = opt.update(finite=not nonfinite)
            memory.stepped()
            speed.add_step(time.perf_counter() - step_started - (read - issued), read - issued)
            state.record_step(None if nonfinite else loss_sum / dist.world_size, skipped, end_of_epoch)
            eta.stepped(state.global_step, time.perf_counter() - step_started)
            progress.update(1)
            if state.global_step == FIRST_ETA_STEP < tc.runtime.log_every and dist.is_main:
                log(f"step {FIRST_ETA_STEP}/{plan.total_steps}: {eta.describe(FIRST_ETA_STEP)}")
            if state.global_step % tc.runtime.log_every == 0 or state.global_step == plan.total_steps:
                _log_train(events, state, plan, lr, speed, opt.runner.loss_scale, grad_norm, eta, memory)
            if state.nonfinite_streak >= tc.max_nonfinite_steps:
                dist.barrier()
                raise TrainingDiverged(_diverged_message(state, tc.max_nonfinite_steps, run.checkpoints_dir))
            stop = state.global_step >= plan.total_steps
            due_eval = _due(state, tc.evaluation.every) or end_of_epoch or stop
            pause_started = time.perf_counter()
            if due_eval and splits.dev is not None:
                early_stop, improved = _evaluate_and_keep_best(opt, objective, splits.dev, tc.evaluation, run, state,
                                                               events, dist, on_eval)
                stop, best_dev = stop or early_stop, improved or best_dev
            if tc.checkpoints.keep and (due_eval or _due(state, tc.checkpoints.every) or stop_asked):
                saved = _checkpoint(opt, run, state, tc.checkpoints.keep, dist)
                speed.restart()  # evaluation and saving are not training throughput
            if due_eval and splits.dev is not None:
                eta.evaluated(time.perf_counter() - pause_started)
            if stop_asked:  # a rank that did not get the signal stops with the others
                raise TrainingInterrupted(signals.signal or signal.SIGTERM, state.global_step, saved)
            if stop:
                break
        progress.close()
        return _finish(opt, objective, splits, run, state, tc.evaluation, events, dist, best_dev)


def _start(opt: Optimization, plan: RunPlan, resume_from: Path | None, dist: Distributed) -> TrainState:
    say(dist, f"plan: {plan.describe()}")
    if resume_from is None:
        return TrainState()
    state = opt.restore(resume_from, dist.rank)
    say(dist, f"resumed from {resume_from}: step {state.global_step}, epoch {state.epoch + 1}, "
              f"{state.epoch_steps_done} steps into it")
    return state


def _steps_left(sampler: TrainBatchSampler, state: TrainState, plan: RunPlan):
    """(examples of one optimizer step, whether it ends its epoch), from where `state` stands; the loop
    moves `state` on after each step, so a resumed run continues mid-epoch. Ends at plan.total_steps
    (max_steps may end a run mid-epoch)."""
    while state.epoch < plan.epochs:
        sampler.set_epoch(state.epoch)
        step_batches = list(sampler)
        for index in range(state.epoch_steps_done, len(step_batches)):
            if state.global_step >= plan.total_steps:
                return
            yield step_batches[index], index + 1 == len(step_batches)


def schedule(splits: Splits, config: Config,
             dist: Distributed = Distributed()) -> tuple[RunPlan, TrainBatchSampler]:
    """The run's plan and its order of step batches.

    One shuffled order of step batches (all examples of one optimizer step), the same on every rank thanks to the
    same seed; each rank takes its share of each micro-batch. Batching by step keeps k micro-batches of b, or r ranks
    of b, exactly one batch of k*b (or r*b), grouping included."""
    tc = config.train
    plan = plan_run(len(splits.train), tc.batch_size, tc.accumulate_steps, tc.epochs, tc.max_steps,
                    tc.optimizer.warmup, dist.world_size)
    return plan, TrainBatchSampler(splits.train.lengths, plan.effective_batch_size, config.seed,
                                   config.data.group_by_length, min_batch=dist.world_size)


def planned_work(plan: RunPlan, sampler: TrainBatchSampler, splits: Splits, config: Config,
                 dist: Distributed = Distributed()) -> StepWork:
    """The run's work as the ETA costs it: every epoch's step batches as `schedule` orders them, and the dev and test
    texts the run will score."""
    epochs = []
    for epoch in range(plan.epochs):
        sampler.set_epoch(epoch)
        epochs.append(list(sampler))
    lengths = {name: None if (f := getattr(splits, name)) is None else np.asarray(f.lengths)
               for name in ("dev", "test")}
    return StepWork.plan(epochs, plan.total_steps, np.asarray(splits.train.lengths), config.train.batch_size,
                         dist.rank, dist.world_size, lengths["dev"], lengths["test"], config.train.evaluation.every)


def _due(state: TrainState, every: int) -> bool:
    return bool(every) and state.global_step % every == 0


def _forward_backward(model, runner: StepRunner, objective, features: Features, step_batch: list[int], step: int,
                      batch_size: int, dist: Distributed, speed: Throughput, reducer: bool = True) -> float:
    """Backward over this rank's share of one optimizer step's examples. Returns this rank's part of the
    step's mean loss, on the device (the loop reads it once, after the ranks' sum: it stops every rank on a NaN).

    Gradients are averaged over the ranks once per optimizer step: by DataParallel's reducer in the backward of
    the one micro-batch (`reducer`), or, when micro-batches accumulate, by one fused all-reduce after the last (every
    backward under no_sync), as PaddleNLP's Trainer does. The reducer cannot take accumulated AMP O2 gradients: after
    the first micro-batch they are float32 master gradients, while its buckets keep the 16-bit parameters' dtype."""
    group, group_examples = micro_batches(step_batch, batch_size, dist.rank, dist.world_size)
    step_loss = None
    for i, indices in enumerate(group):
        sync = model.no_sync() if dist.active and (not reducer or i < len(group) - 1) else contextlib.nullcontext()
        with sync:
            # A sum over the examples divided by the group's size: k micro-batches of b are exactly one
            # batch of k*b, and a last, smaller group is averaged over its own size. DataParallel
            # averages over ranks, hence the factor world_size.
            loss = objective.loss(model, features, indices, step, runner.autocast) * (dist.world_size / group_examples)
            runner.backward(loss)
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        speed.add_batch(np.array([len(features.input_ids[i]) for i in indices]))  # not .lengths: O(all) per call
    if dist.active and not reducer:
        dist.average_gradients(model.parameters())
    speed.examples += group_examples
    return step_loss


def _log_train(events, state: TrainState, plan: RunPlan, lr: float, speed: Throughput, loss_scale: float,
               grad_norm, eta: TrainingEta, memory: GpuMemory) -> None:
    """Every rank calls it (the window loss is part of the checkpointed state); only rank 0 writes."""
    values = {"loss": state.take_window_loss(), **speed.take(), "epoch": state.epoch, "lr": lr,
              "loss_scale": loss_scale, "skipped_steps": state.skipped_steps}
    if events is None:
        return
    values["grad_norm"] = float(grad_norm) if grad_norm is not None else None
    events.write("train", state.global_step, **values, **memory.values())
    loss = "n/a" if values["loss"] is None else f"{values['loss']:.4f}"
    # on a GPU, where the host queues work the device runs later: how a step's time splits (on a CPU the host
    # does the work itself and the split says nothing)
    split = (f" (host {values['host_ms_per_step']:.0f} ms a step, waiting {values['waiting_ms_per_step']:.0f} ms)"
             if memory.on_gpu else "")
    log(f"step {state.global_step}/{plan.total_steps} loss {loss} lr {lr:.3g} {values['samples_per_s']:.1f} "
        f"samples/s{split}, {eta.describe(state.global_step)}")


def _evaluate_and_keep_best(opt: Optimization, objective, dev: Features, evaluation: EvaluationConfig,
                            run: RunFolder, state: TrainState, events, dist: Distributed,
                            on_eval=None) -> tuple[bool, dict | None]:
    """Score dev (each rank a share, gathered), save best/ when it improved. (True to stop early, the report
    where it is the best so far)."""
    report = _evaluate_dev(opt.model, objective, dev, evaluation.batch_size, dist, opt.runner.autocast)
    if events:
        events.write("eval", state.global_step, **report)
    say(dist, f"eval step {state.global_step}: " + " ".join(f"{m} {report[m]:.4f}" for m in objective.metrics))
    if on_eval is not None:
        on_eval(state.global_step, report[evaluation.metric])
    if state.record_eval(report[evaluation.metric]):
        if dist.is_main:
            run.save_best(opt.model, report)
        return False, report
    patience = evaluation.early_stopping_patience
    if patience and state.evals_since_best >= patience:
        say(dist, f"early stopping: no {evaluation.metric} gain in {state.evals_since_best} evaluations")
        return True, None
    return False, None


def _evaluate_dev(model, objective, dev: Features, batch_size: int, dist: Distributed, autocast) -> dict:
    """Each rank scores every world_size-th dev example; the gathered parts cover each example exactly once,
    so every rank computes the same metrics. `autocast` is training's: an O2 model run outside it would
    compute in pure float16, without Paddle's list of ops kept in float32."""
    objective.prepare(model, autocast)
    mine = np.arange(dist.rank, len(dev), dist.world_size)
    part = objective.score(model, dev, mine, batch_size, autocast)
    parts = dist.gather(objective.shipped(part, dev)) if dist.active else [part]
    model.train()
    return objective.report(dev, parts)


def _checkpoint(opt: Optimization, run: RunFolder, state: TrainState, keep: int, dist: Distributed) -> Path:
    """Every rank calls it: each one's RNG state is gathered, so each resumes its own dropout stream."""
    rng_states = dist.gather(capture_rng())
    if dist.is_main:
        opt.save(run.checkpoints_dir, state, rng_states)
        rotate_checkpoints(run.checkpoints_dir, keep, protect_step=state.best_step)
    dist.barrier()  # nobody moves on (or exits) while rank 0 is still writing
    return run.checkpoints_dir / f"step-{state.global_step}"


def _finish(opt: Optimization, objective, splits: Splits, run: RunFolder, state: TrainState,
            evaluation: EvaluationConfig, events, dist: Distributed, best_dev: dict | None) -> Results | None:
    """Rank 0 scores the best model (reloaded from best/) on test, and on dev unless `best_dev` is its evaluation's
    report (a run resumed after its best evaluation scores dev again), and writes the `Results`."""
    _check_replicas_agree(opt.model, dist)
    if not dist.is_main:
        dist.barrier()  # wait for rank 0, so the launcher sees one finished job
        return None
    if splits.dev is None:
        state.best_step = state.global_step
        objective.prepare(opt.model, opt.runner.autocast)
        run.save_best(opt.model, None)
        objective = objective.calibrated(None)
    run.load_best_weights(opt.model)
    known = {"dev": best_dev} if best_dev is not None else {}
    scored = [f"{name} ({len(f)} texts)" for name in ("dev", "test")
              if (f := getattr(splits, name)) is not None and name not in known]
    if scored:
        say(dist, f"training done; scoring the best model (step {state.best_step}) on {' and '.join(scored)}"
                  + ("; its dev scores are its evaluation's" if known else ""))
    results = _scored(opt.model, objective, splits, evaluation, opt.runner.autocast, state.best_step,
                      state.skipped_steps, known)
    events.write("results", state.global_step, **results.as_dict())
    run.write_results(results)
    dist.barrier()
    return results


def keep_untrained(model, splits: Splits, config: Config, run: RunFolder, objective) -> Results:
    """A model that needs no training step (zero-shot: its prototypes are its labels' descriptions), saved as best/
    and scored on dev and test as a trained one is; one process."""
    with run.event_log(None) as events:
        results = _scored(model, objective, splits, config.train.evaluation, contextlib.nullcontext, 0, 0)
        run.save_best(model, results.dev)  # what dev decided (temperature, abstain threshold) goes into best/
        events.write("results", 0, **results.as_dict())
    run.write_results(results)
    return results


def _scored(model, objective, splits: Splits, evaluation: EvaluationConfig, autocast, best_step: int,
            skipped_steps: int, known: dict | None = None) -> Results:
    """The `Results` of the model as it stands on dev and test (test with what dev decided); a split's report in
    `known` is taken as it is."""
    reports = dict(known or {})
    for name in ("dev", "test"):
        features = getattr(splits, name)
        if features is not None and name not in reports:
            every = np.arange(len(features))
            reports[name] = objective.report(features, [objective.score(model, features, every, evaluation.batch_size,
                                                                        autocast)])
        if name == "dev" and features is not None:  # test is scored as the saved model will be (dev's thresholds)
            objective = objective.calibrated(reports["dev"])
    return Results(best_step, evaluation.metric, skipped_steps, **reports)


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
            f"{state.global_step}); {last}. Lower train.optimizer.learning_rate or check the data, then resume "
            "with -o train.resume=PATH")


class GpuMemory:
    """The peak GPU memory, and what the first optimizer step left allocated (weights, gradients, optimizer state:
    the peak less it is the activations'); the allocator's own counts, no device sync. Nothing on a CPU."""

    def __init__(self):
        self.on_gpu = paddle.device.get_device().startswith("gpu")
        self.after_first_step = None

    def stepped(self) -> None:
        if self.on_gpu and self.after_first_step is None:
            self.after_first_step = round(paddle.device.cuda.memory_allocated() / 2**20)

    def values(self) -> dict:
        if not self.on_gpu:
            return {}
        return {"gpu_memory_peak_mib": round(paddle.device.cuda.max_memory_allocated() / 2**20),
                "gpu_memory_after_first_step_mib": self.after_first_step}


class Throughput:
    """Examples and tokens per second since the last log line or save (not part of a checkpoint)."""

    def __init__(self, packed: bool = False):
        self.packed = packed  # batches packed into one row without padding (train.runtime.packed_batches)
        self.restart()

    def restart(self) -> None:
        self.examples, self.tokens, self.padded_tokens, self.started = 0, 0, 0, time.perf_counter()
        self.steps, self.host_seconds, self.waiting_seconds = 0, 0.0, 0.0

    def add_step(self, host_seconds: float, waiting_seconds: float) -> None:
        """One optimizer step: the host's time queueing its work, and its time blocked in the step's one read (on a
        GPU: waiting for the device to finish the step, and under data parallelism for the other ranks). A GPU
        whose host hardly waits is starved by Python's dispatch (host-bound), not measuring the GPU."""
        self.steps += 1
        self.host_seconds += host_seconds
        self.waiting_seconds += waiting_seconds

    def add_batch(self, lengths: np.ndarray) -> None:
        """A micro-batch of examples of these lengths, padded to the longest (packed: not padded at all)."""
        self.tokens += int(lengths.sum())
        self.padded_tokens += int(lengths.sum()) if self.packed else int(lengths.max()) * len(lengths)

    def take(self) -> dict:
        """samples/s of the whole job; real and padded (real + pad) tokens/s of this rank; its host ms a step queueing
        work and waiting in the step's read. Restarts."""
        seconds = max(time.perf_counter() - self.started, 1e-9)
        steps = max(self.steps, 1)
        rates = {"samples_per_s": self.examples / seconds, "tokens_per_s": self.tokens / seconds,
                 "padded_tokens_per_s": self.padded_tokens / seconds,
                 "host_ms_per_step": 1000 * self.host_seconds / steps,
                 "waiting_ms_per_step": 1000 * self.waiting_seconds / steps}
        self.restart()
        return rates
