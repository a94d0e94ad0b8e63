"""A backbone against its trimmed copy, side by side in one run: parameters, training samples/s and peak memory.

    python tools/trim_bench.py --full models/multilingual-e5-small --trimmed out/e5-small-trimmed \\
        --data data/demo/train.tsv --steps 40 --rounds 2

Each run is a child `train` of `--steps` optimizer steps on the same data, recipe and seed (its own process, so its
peak resident memory is its own); the runs alternate full, trimmed, full, trimmed (`--rounds`), so that a slow spell
of a shared machine falls on both. Samples/s counts the steps after the first `--skip` (kernels built, caches warm).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from paddle_ft.runtime import cpu_model, cpu_speed_flags  # noqa: E402


def train_once(backbone: Path, data: Path, steps: int, skip: int, work: Path) -> dict:
    """One short training run in a child process: its samples/s after `skip` steps and its peak memory."""
    out = work / f"run-{os.urandom(4).hex()}"
    args = ["train", "-c", str(ROOT / "configs" / "demo-e5-long.yaml"), "-o", f"output_dir={out}",
            "-o", f"model.backbone={backbone}", "-o", f"data.train={data}", "-o", "data.dev=null",
            "-o", "data.test=null", "-o", f"train.max_steps={steps}", "-o", "train.runtime.log_every=1",
            "-o", "train.checkpoints.keep=1", "-o", f"model.cache_dir={work / 'backbones'}"]
    child = subprocess.Popen([sys.executable, "-m", "paddle_ft", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"the run on {backbone} failed: {child.stderr.read()[-2000:]}")
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [e for e in events if e.get("event") == "train" and e["step"] > skip]
    return {"samples_per_s": median(e["samples_per_s"] for e in timed), "peak_mb": usage.ru_maxrss / 1024}


def parameters(folder: Path) -> tuple[int, int]:
    """(all parameters, those of the word-embedding table) from config.json."""
    c = json.loads((folder / "config.json").read_text())
    h, layers, ffn = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    per_layer = 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h  # attention, feed-forward, two layer norms
    embeddings = (c["vocab_size"] + c["max_position_embeddings"] + c["type_vocab_size"]) * h + 2 * h
    return embeddings + layers * per_layer, c["vocab_size"] * h


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", type=Path, required=True)
    parser.add_argument("--trimmed", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"cpu: {cpu_model()}, flags {' '.join(cpu_speed_flags())}, {os.cpu_count()} cores")
    runs = {"full": [], "trimmed": []}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.rounds):
            for name, folder in (("full", args.full), ("trimmed", args.trimmed)):
                runs[name].append(train_once(folder, args.data, args.steps, args.skip, Path(work)))
                print(f"{name}: {runs[name][-1]['samples_per_s']:.1f} samples/s, peak {runs[name][-1]['peak_mb']:,.0f} MB",
                      flush=True)
    rows = {}
    for name, folder in (("full", args.full), ("trimmed", args.trimmed)):
        total, table = parameters(folder)
        rows[name] = {"parameters": total, "embedding_table": table,
                      "samples_per_s": median(r["samples_per_s"] for r in runs[name]),
                      "peak_mb": max(r["peak_mb"] for r in runs[name])}
        print(f"{name:8s} {total / 1e6:6.1f}M parameters ({table / 1e6:.1f}M in the word embeddings), "
              f"{rows[name]['samples_per_s']:.1f} samples/s (median of {args.rounds}), peak {rows[name]['peak_mb']:,.0f} MB")
    full, trimmed = rows["full"], rows["trimmed"]
    print(f"trimmed / full: parameters {trimmed['parameters'] / full['parameters']:.3f}x, training speed "
          f"{trimmed['samples_per_s'] / full['samples_per_s']:.2f}x, peak memory {trimmed['peak_mb'] / full['peak_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
