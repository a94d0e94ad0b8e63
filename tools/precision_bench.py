"""bfloat16 training against float32 on one recipe, over seeds, in one run:

    python tools/precision_bench.py [--config configs/demo.yaml] [--seeds 3] [--output out/precision-bench]

Trains `--config` once per seed (the config's seed and the next ones) in float32 and with bfloat16 matmuls
(`train.amp.enabled: true`, `dtype: bfloat16`: what `auto` picks on a CPU with bfloat16 arithmetic), the two taking
turns, and writes OUTPUT/precision_bench.json and .md: dev and test accuracy as mean and range, each seed's, and
the training samples/s (median of each run's log windows after its first, then the median over the seeds). The bar
(issue 66): bfloat16's mean test accuracy within 0.3 points of float32's. A CPU without bfloat16 arithmetic refuses
the bfloat16 runs (train says why). A finished run (OUTPUT/runs/NAME/results.json) is reused by a later run into the
same folder: six runs of the e5 demo take about two hours on 2 cores.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.folder import bench_output  # noqa: E402
from bench.seeds import over_seeds  # noqa: E402
from few_shot_bench import machine, train  # noqa: E402

from paddle_ft.arguments import ArgumentParser, positive_int  # noqa: E402
from paddle_ft.config import load_config  # noqa: E402
from paddle_ft.errors import UserError  # noqa: E402

PRECISIONS = {"float32": ["train.amp.enabled=false"],
              "bfloat16": ["train.amp.enabled=true", "train.amp.dtype=bfloat16"]}
BAR_POINTS = 0.3  # bfloat16's mean test accuracy at most this far below float32's
RESULTS = "precision_bench.json"


def main() -> int:
    parser = ArgumentParser(prog="tools/precision_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--seeds", type=positive_int, default=3,
                        help="runs per precision: the config's seed and the next")
    parser.add_argument("--output", type=Path, default=Path("out/precision-bench"))
    args = parser.parse_args()
    try:  # the config as train reads it: a missing file or a bad key is one line naming it, before anything runs
        first_seed = load_config(args.config).seed
    except UserError as exc:
        parser.error(str(exc))
    seeds = [first_seed + i for i in range(args.seeds)]
    with bench_output(args.output) as output:  # never a folder of someone else's
        table = measure(output, Path(args.config), seeds)
    print(table)
    return 0


def measure(output: Path, config: Path, seeds: list[int]) -> str:
    """Each seed in each precision, taking turns (a slow spell of the machine falls on both); the results written
    into `output`, and their table returned."""
    (output / "logs").mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[int, dict]] = {precision: {} for precision in PRECISIONS}
    for seed in seeds:
        for precision, overrides in PRECISIONS.items():
            name = f"{precision}-seed-{seed}"
            results = train(output, name, config, [f"seed={seed}", *overrides])
            runs[precision][seed] = {"test_accuracy": results["test"]["accuracy"],
                                     "dev_accuracy": results["dev"]["accuracy"],
                                     "samples_per_s": training_speed(output / "runs" / name)}
            print(f"{name}: test {runs[precision][seed]['test_accuracy']:.4f}", file=sys.stderr, flush=True)
    summary = {"config": str(config), "machine": machine(), "seeds": seeds,
               "precisions": {precision: over_seeds(done) for precision, done in runs.items()}}
    summary["bar"] = bar(summary["precisions"])
    (output / RESULTS).write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    table = markdown(summary)
    (output / "precision_bench.md").write_text(table, encoding="utf-8")
    return table


def training_speed(run: Path) -> float:
    """The median samples/s of a run's training log windows after its first (start-up: the kernels built)."""
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    speeds = [e["samples_per_s"] for e in events if e["event"] == "train"]
    return statistics.median(speeds[1:] or speeds)


def bar(precisions: dict) -> dict:
    behind = 100 * (precisions["float32"]["test_accuracy"] - precisions["bfloat16"]["test_accuracy"])
    return {"bfloat16_points_behind_float32": round(behind, 2), "met": behind <= BAR_POINTS}


def markdown(summary: dict) -> str:
    m = summary["machine"]
    lines = [f"# bfloat16 against float32 training, {summary['config']}, seeds "
             f"{', '.join(map(str, summary['seeds']))}", "",
             f"Machine: {m['cpu']} ({m['cpu_kind']}), {m['cores']} cores; CPU flags: {' '.join(m['flags'])}", "",
             "| precision | test accuracy, mean (range) | per seed | dev accuracy, mean (range) | training samples/s |",
             "|---|---|---|---|---|"]
    for precision, row in summary["precisions"].items():
        lines.append(f"| {precision} | {row['test_accuracy']:.4f} ({row['test_accuracy_range'][0]:.4f}-"
                     f"{row['test_accuracy_range'][1]:.4f}) | "
                     + ", ".join(f"{run['test_accuracy']:.4f}" for run in row["runs"].values())
                     + f" | {row['dev_accuracy']:.4f} ({row['dev_accuracy_range'][0]:.4f}-"
                       f"{row['dev_accuracy_range'][1]:.4f}) | {row['samples_per_s']:.1f} |")
    speed = summary["precisions"]["bfloat16"]["samples_per_s"] / summary["precisions"]["float32"]["samples_per_s"]
    b = summary["bar"]
    lines += ["", f"bfloat16 {b['bfloat16_points_behind_float32']:+.2f} points behind float32 on test (bar "
                  f"{BAR_POINTS}): {'met' if b['met'] else 'NOT met'}; {speed:.2f}x its training samples/s"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
