"""How well `label-issues` finds labels flipped on purpose, and what `--prune` gives back, on a config's data:
flips a seeded share of the training rows' labels into a copy, runs `label-issues --prune` on it, and prints the
flagged list's precision at k (k = rows flipped) and recall, and the test scores with and without the flagged rows.

    python tools/label_noise.py --config configs/demo-tiny.yaml --share 0.1 --folds 5 --output out/label-noise
    python tools/label_noise.py --config configs/demo.yaml --rows 2000 --method embeddings --no-prune --output DIR

`--rows N` takes the first N training rows (dev is left out of the pool then, so the pool is those N rows).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_ft import runtime  # noqa: E402

runtime.configure()  # before paddle's import, which would otherwise leave the runs below one math thread
from paddle_ft.workflows.build import format_of_split, read_dataset  # noqa: E402
from paddle_ft.cli import main as paddle_ft  # noqa: E402
from paddle_ft.config import load_config  # noqa: E402
from paddle_ft.data.readers import Columns, write_examples  # noqa: E402

from bench.folder import bench_output  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--share", type=float, default=0.1, help="share of training rows whose label is flipped")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rows", type=int, help="only the first N training rows, and no dev rows in the pool")
    parser.add_argument("--method", default="auto", help="label-issues --method")
    parser.add_argument("--no-prune", action="store_true", help="leave out --prune's two trainings")
    parser.add_argument("-o", dest="override", action="append", default=[])
    args = parser.parse_args()
    if args.rows:
        args.override += ["data.dev=null"]
    with bench_output(args.output) as root:
        return measure(root, args)


def measure(root: Path, args) -> int:
    config = load_config(args.config, args.override)
    dataset = read_dataset(config.data, config.task)
    rows, names = dataset.examples["train"][:args.rows], dataset.label_map.names
    if config.task != "single_label":
        sys.exit("error: tools/label_noise.py flips single labels; give a single-label config")
    flipped = set(random.Random(args.seed).sample(range(len(rows)), round(args.share * len(rows))))
    rng = random.Random(args.seed + 1)
    noisy = [r if i not in flipped else dataclasses.replace(r, label=rng.choice([n for n in names if n != r.label]))
             for i, r in enumerate(rows)]
    fmt = format_of_split(config.data, config.data.train)
    train = root / f"train-flipped.{fmt}"
    write_examples(train, fmt, Columns.of(config.data, config.task == "multi_label"), noisy)
    code = paddle_ft(["label-issues", "--config", args.config, "--folds", str(args.folds), "--output",
                      str(root / "label-issues"), "--method", args.method, *([] if args.no_prune else ["--prune"]),
                      *[item for o in [*args.override, f"data.train={train}"] for item in ("-o", o)]])
    if code:
        return code
    # line n of the written file is row n - 2 (a header, then one row per line)
    with open(root / "label-issues" / "label_issues.tsv", encoding="utf-8", newline="") as table:
        flagged = [int(r["line"]) - 2 for r in csv.DictReader(table, delimiter="\t", quoting=csv.QUOTE_NONE)
                   if r["file"] == str(train)]
    k = len(flipped)
    summary = json.loads((root / "label-issues" / "label_issues.json").read_text(encoding="utf-8"))
    print(json.dumps({"rows": len(rows), "flipped": k, "flagged_in_train": len(flagged),
                      "precision_at_k": len(set(flagged[:k]) & flipped) / k,
                      "recall": len(set(flagged) & flipped) / k, "method": summary["method"],
                      "prune": summary.get("prune")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
