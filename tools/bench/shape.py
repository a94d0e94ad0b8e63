"""What every engine in the benchmark shares: the model shape, the batch and how throughput is summarised.
Standard library only: the Hugging Face peer imports it from another virtual environment."""
from __future__ import annotations

import json
import os
import resource
import sys
import time

SHAPE_VARIABLE = "PADDLE_FT_BENCH_SHAPE"  # LAYERS,HIDDEN,HEADS,INTERMEDIATE, set by --model-shape for the children
DEFAULT_SHAPE = "4,256,4,1024"
MAX_LENGTH = 128
BATCH_SIZE = 32
LEARNING_RATE = 5e-5
WINDOW_STEPS = 8   # steps are timed in windows of this many ...
WARMUP_WINDOWS = 1  # ... the first windows are warm-up and dropped (a run that warmed up on other texts drops none)
RESULT_MARK = "BENCH_RESULT "


def model_shape() -> dict:
    layers, hidden, heads, intermediate = (int(v) for v in os.environ.get(SHAPE_VARIABLE, DEFAULT_SHAPE).split(","))
    return {"num_layers": layers, "hidden_size": hidden, "num_heads": heads, "intermediate_size": intermediate,
            "max_length": MAX_LENGTH}


def train_steps(windows: int) -> int:
    return WINDOW_STEPS * (WARMUP_WINDOWS + windows)


def measured_texts(windows: int) -> int:
    """The texts every engine of the training table trains on for one timed epoch: `windows` windows of batches."""
    return windows * WINDOW_STEPS * BATCH_SIZE


def summarise_windows(windows: list[dict], warmup_windows: int = WARMUP_WINDOWS) -> dict:
    """Throughput over the measured windows (the first `warmup_windows` dropped), as totals over time: with
    length-grouped batches, windows differ in length on purpose (the Hugging Face sampler even starts
    with the longest batches), so the rate over all of them is what an epoch would see. Each window is
    {"seconds", "samples", "real_tokens", "padded_tokens"}; padded = real + pad tokens, what the
    matmuls actually process."""
    measured = windows[warmup_windows:]
    if not measured:
        raise ValueError("no window after warm-up: train for more steps")
    seconds = sum(w["seconds"] for w in measured)
    total = {key: sum(w[key] for w in measured) for key in ("samples", "real_tokens", "padded_tokens")}
    return {"samples_per_s": total["samples"] / seconds, "real_tokens_per_s": total["real_tokens"] / seconds,
            "padded_tokens_per_s": total["padded_tokens"] / seconds,
            "padding_share": 1 - total["real_tokens"] / total["padded_tokens"],
            "measured_steps": WINDOW_STEPS * len(measured), "measured_seconds": seconds}


def step_windows(step_ends: list[float], started: float, samples: list[int], real: list[int],
                 padded: list[int]) -> list[dict]:
    """Windows of WINDOW_STEPS steps from per-step end times and per-step batch counts."""
    windows, begin = [], started
    for end in range(WINDOW_STEPS, len(step_ends) + 1, WINDOW_STEPS):
        steps = slice(end - WINDOW_STEPS, end)
        windows.append({"seconds": step_ends[end - 1] - begin, "samples": sum(samples[steps]),
                        "real_tokens": sum(real[steps]), "padded_tokens": sum(padded[steps])})
        begin = step_ends[end - 1]
    return windows


class StepRecorder:
    """Per-step batch counts (recorded by the collator) and step end times (recorded by a Trainer
    callback), for the PaddleNLP and the Hugging Face Trainer alike: their callback APIs have the same
    method names, only the base classes differ."""

    def __init__(self):
        self.started, self.ends = 0.0, []
        self.samples, self.real, self.padded = [], [], []

    def batch(self, samples: int, real_tokens: int, padded_tokens: int) -> None:
        self.samples.append(samples)
        self.real.append(real_tokens)
        self.padded.append(padded_tokens)

    def callback(self, trainer_callback_class):
        """An instance of a `trainer_callback_class` subclass that times the steps."""
        recorder = self

        class StepClock(trainer_callback_class):
            def on_train_begin(self, *unused, **kwargs):
                recorder.started = time.perf_counter()

            def on_step_end(self, *unused, **kwargs):
                recorder.ends.append(time.perf_counter())

        return StepClock()

    def summary(self, warmup_windows: int = WARMUP_WINDOWS) -> dict:
        return summarise_windows(step_windows(self.ends, self.started, self.samples, self.real, self.padded),
                                 warmup_windows)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def emit(result: dict) -> None:
    """The child's answer, on one marked line of standard output."""
    result.setdefault("peak_rss_mb", peak_rss_mb())
    print(RESULT_MARK + json.dumps(result), flush=True)
    sys.stdout.flush()
