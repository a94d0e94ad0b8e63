"""What every engine in the benchmark shares: the model shape, the batch and how throughput is summarised.
Standard library only: the Hugging Face peer imports it from another virtual environment."""
from __future__ import annotations

import json
import resource
import statistics
import sys

SHAPE = {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024, "max_length": 128}
BATCH_SIZE = 32
LEARNING_RATE = 5e-5
WINDOW_STEPS = 8   # throughput is summed over windows of this many steps ...
WARMUP_WINDOWS = 1  # ... the first windows are warm-up and dropped; the median of the rest is reported
RESULT_MARK = "BENCH_RESULT "


def train_steps(windows: int) -> int:
    return WINDOW_STEPS * (WARMUP_WINDOWS + windows)


def summarise_windows(windows: list[dict]) -> dict:
    """Medians over the measured windows; each window is {"samples_per_s", "real_tokens_per_s",
    "padded_tokens_per_s"} (padded = real + pad tokens, what the matmuls actually process)."""
    measured = windows[WARMUP_WINDOWS:]
    if not measured:
        raise ValueError("no window after warm-up: train for more steps")
    summary = {key: statistics.median(w[key] for w in measured)
               for key in ("samples_per_s", "real_tokens_per_s", "padded_tokens_per_s")}
    summary["padding_share"] = 1 - statistics.median(w["real_tokens_per_s"] / w["padded_tokens_per_s"]
                                                     for w in measured)
    summary["windows"] = len(measured)
    return summary


def step_windows(step_ends: list[float], started: float, samples: list[int], real: list[int],
                 padded: list[int]) -> list[dict]:
    """Windows of WINDOW_STEPS steps from per-step end times and per-step batch counts."""
    windows, begin = [], started
    for end in range(WINDOW_STEPS, len(step_ends) + 1, WINDOW_STEPS):
        steps, seconds = slice(end - WINDOW_STEPS, end), step_ends[end - 1] - begin
        windows.append({"samples_per_s": sum(samples[steps]) / seconds,
                        "real_tokens_per_s": sum(real[steps]) / seconds,
                        "padded_tokens_per_s": sum(padded[steps]) / seconds})
        begin = step_ends[end - 1]
    return windows


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def emit(result: dict) -> None:
    """The child's answer, on one marked line of standard output."""
    result.setdefault("peak_rss_mb", peak_rss_mb())
    print(RESULT_MARK + json.dumps(result), flush=True)
    sys.stdout.flush()
