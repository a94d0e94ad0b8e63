"""What to label next, measured: a simulated labelling loop on the demo reviews, each `select` strategy against
random, in one run:

    python tools/active_learning_bench.py [--task demo|domain] [--config configs/demo.yaml] [--seeds 5]
                                          [--start 200] [--rounds 3] [--batch 200] [--pool 5000] [--steps 200]
                                          [--train-batch 32] [--learning-rate 1e-4] [--precision float32]
                                          [--warm-start]
                                          [--strategies random uncertainty margin diverse mixed]
                                          [--output out/active-learning-bench]

For each seed: `--start` rows of the task's training file are labelled, `--pool` other rows are the unlabelled pool
(their labels hidden until selected). `--config` (the demo's: multilingual-e5-small, after make demo; the shipped
2-layer encoder: configs/demo-tiny.yaml) is trained on the labelled rows; then, for `--rounds` rounds, `python -m
paddle_ft select-texts` picks `--batch` rows of the pool with the latest model, their labels are "given" (read from the
task's file, as an annotator would), and the config is trained again on all labelled rows. Test accuracy on the
task's whole test file after every round; mean and spread over the seeds, a table and a picture
(OUTPUT/active_learning.png). No dev file is used (a labelling project starting out has none): each model is its
last epoch's, after about `--steps` steps of `--train-batch` rows (the demo config's epochs of a few hundred rows are
too few steps for a model to learn anything).

Tasks: `demo`, the demo's reviews (2 classes: margin ranks exactly as uncertainty does, so it is not trained
again there); `domain`, the demo's reviews that
name exactly one kind of product, labelled kind + sentiment (6 classes; tools/few_shot_bench.py's domain task).

A finished training (OUTPUT/runs/NAME/results.json) and selection are reused by a later run into the same folder.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from few_shot_bench import DEMO, ROOT, domain_task, machine, read_rows, run, train, write_rows  # noqa: E402

from bench.folder import bench_output  # noqa: E402

STRATEGIES = ("random", "uncertainty", "margin", "diverse", "mixed")
PRECISIONS = {"float32": ["train.amp.enabled=false"], "auto": ["train.amp.enabled=auto"],
              "bfloat16": ["train.amp.enabled=true", "train.amp.dtype=bfloat16"]}
RESULTS = "active_learning.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="out/active-learning-bench")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--start", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--pool", type=int, default=5000)
    parser.add_argument("--task", choices=("demo", "domain"), default="demo")
    parser.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    parser.add_argument("--steps", type=int, default=200, help="about this many training steps per model")
    parser.add_argument("--train-batch", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, help="the config's train.optimizer.learning_rate otherwise")
    parser.add_argument("--warm-start", action="store_true",
                        help="each round's model starts from the previous round's encoder (as a labelling loop "
                             "retrains the model it has), not from the config's backbone")
    parser.add_argument("--precision", choices=("float32", "bfloat16", "auto"), default="float32",
                        help="train.amp for every model (default float32: one precision whatever the CPU; auto "
                             "chooses by CPU and model)")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    args = parser.parse_args()
    with bench_output(args.output) as output:
        return bench(output, args)


def bench(output: Path, args) -> int:
    (output / "logs").mkdir(parents=True, exist_ok=True)
    args.data = DEMO if args.task == "demo" else domain_task(output / "data" / "domain")
    train_rows = read_rows(args.data / "train.tsv")
    if "margin" in args.strategies and len({label for _, label in train_rows}) == 2:
        print("two classes: margin ranks exactly as uncertainty does; not trained again", flush=True)
        args.strategies = [s for s in args.strategies if s != "margin"]
    curves = {s: [] for s in args.strategies}
    for seed in range(args.seeds):
        rows = random.Random(seed).sample(train_rows, args.start + args.pool)
        start, pool = rows[:args.start], rows[args.start:]
        pool_file = write_rows(output / "data" / f"seed-{seed}" / "pool.tsv", pool)
        first = accuracy(output, args, f"seed-{seed}-start", write_rows(output / "data" / f"seed-{seed}" /
                                                                        "start.tsv", start), seed)
        for strategy in args.strategies:
            curves[strategy].append([first, *loop(output, args, seed, strategy, start, pool, pool_file)])
            print(f"seed {seed}, {strategy}: " + ", ".join(f"{a:.4f}" for a in curves[strategy][-1]), flush=True)
        write_results(output, args, curves, seed + 1)
    return 0


def loop(output: Path, args, seed: int, strategy: str, start, pool, pool_file: Path) -> list[float]:
    """Test accuracy after each round of selecting `args.batch` rows of the pool with the latest model."""
    labelled, taken, scores = list(start), set(), []
    model = output / "runs" / f"seed-{seed}-start" / "best"
    for round_ in range(1, args.rounds + 1):
        name = f"seed-{seed}-{strategy}-round-{round_}"
        selected = output / "data" / f"seed-{seed}" / f"{strategy}-round-{round_}.jsonl"
        if not selected.is_file():
            labelled_file = write_rows(output / "data" / f"seed-{seed}" / f"{strategy}-labelled-{round_ - 1}.tsv",
                                       labelled)
            run(output, f"select-{name}", [sys.executable, "-m", "paddle_ft", "select-texts", "--model", model,
                                           "--pool", pool_file, "--count", args.batch, "--strategy", strategy,
                                           "--to", "doccano", "--labelled", labelled_file, "--seed", seed,
                                           "--output-file", selected])
        lines = [json.loads(line)["line"] for line in selected.read_text(encoding="utf-8").splitlines()]
        assert not taken & set(lines), "select chose a row labelled already"
        taken |= set(lines)
        labelled += [pool[line - 2] for line in lines]  # line 1 is the header
        scores.append(accuracy(output, args, name, write_rows(output / "data" / f"seed-{seed}" /
                                                              f"{strategy}-labelled-{round_}.tsv", labelled), seed,
                               model if args.warm_start else None))
        model = output / "runs" / name / "best"
    return scores


def accuracy(output: Path, args, name: str, labelled: Path, seed: int, warm_from: Path | None = None) -> float:
    """Test accuracy of the config trained on `labelled`; `warm_from`: the encoder starts from that model's (the
    previous round's: a labelling loop retrains the model it has), its head new."""
    rows = len(read_rows(labelled))
    epochs = max(1, math.ceil(args.steps * args.train_batch / rows))  # a few hundred rows: many epochs for the steps
    results = train(output, name, Path(args.config),
                    [f"data.train={labelled}", "data.dev=null", f"data.test={args.data / 'test.tsv'}",
                     "data.labels=null", f"seed={seed}", f"train.epochs={epochs}",
                     f"train.batch_size={args.train_batch}", *PRECISIONS[args.precision],
                     *([f"model.backbone={warm_from}"] if warm_from else []),
                     *([f"train.optimizer.learning_rate={args.learning_rate}"] if args.learning_rate else [])])
    return results["test"]["accuracy"]


def write_results(output: Path, args, curves: dict, seeds: int) -> None:
    sizes = [args.start + args.batch * r for r in range(args.rounds + 1)]
    table = {s: [{"mean": statistics.mean(c[r] for c in runs), "stdev": statistics.stdev(c[r] for c in runs)
                  if len(runs) > 1 else 0.0} for r in range(args.rounds + 1)] for s, runs in curves.items()}
    results = {"machine": machine(), "seeds": seeds, "labelled_rows": sizes, "pool": args.pool, "task": args.task,
               "config": str(args.config), "steps": args.steps, "train_batch": args.train_batch,
               "learning_rate": args.learning_rate, "precision": args.precision, "warm_start": args.warm_start,
               "test_rows": len(read_rows(args.data / "test.tsv")), "test_accuracy": table, "runs": curves}
    (output / RESULTS).write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    lines = [f"Active learning, task {args.task}, {Path(args.config).name} ({seeds} seeds, pool {args.pool}, batch "
             f"{args.batch}, ~{args.steps} steps of {args.train_batch} a model"
             f"{f' at learning rate {args.learning_rate:g}' if args.learning_rate else ''}, {args.precision}"
             f"{', each round from the last' if args.warm_start else ''}; "
             f"{results['machine']['cpu']}): test "
             "accuracy, mean ± stdev", "",
             "| strategy | " + " | ".join(f"{n} rows" for n in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    lines += [f"| {s} | " + " | ".join(f"{x['mean']:.4f} ± {x['stdev']:.4f}" for x in row) + " |"
              for s, row in table.items()]
    (output / "active_learning.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    picture(output / "active_learning.png", sizes, table)
    print("\n".join(lines), flush=True)


def picture(path: Path, sizes: list[int], table: dict) -> None:
    """The curves, in the run report's plain style: mean with a ±1 stdev band per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for strategy, row in table.items():
        means = [x["mean"] for x in row]
        spread = [x["stdev"] for x in row]
        axes.plot(sizes, means, marker="o", label=strategy)
        axes.fill_between(sizes, [m - s for m, s in zip(means, spread)], [m + s for m, s in zip(means, spread)],
                          alpha=0.15)
    axes.set_xlabel("labelled rows")
    axes.set_ylabel("test accuracy")
    axes.set_xticks(sizes)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


if __name__ == "__main__":
    sys.exit(main())
