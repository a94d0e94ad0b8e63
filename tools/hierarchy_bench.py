"""Labels as a tree against flat labels, measured: the demo's domain task (hotel / book / laptop x negative /
positive) trained three ways on the same rows, leaves and seeds, in one run:

    python tools/hierarchy_bench.py [--seeds 3] [--config configs/demo-tiny.yaml] [--output out/hierarchy-bench]

- flat: the six labels as names (酒店负面), the usual softmax;
- tree: the same six written as paths (酒店/负面) with data.label_hierarchy "/": the same softmax over the leaves,
  scored per level, abstaining per level;
- tree + level loss: the same, with train.level_loss 1 (the kind's cross-entropy, from the sum of its leaves'
  probabilities, added to the leaves').

Reported on the domain task's test file, mean over the seeds: leaf accuracy (the whole path), level-1 (kind)
accuracy, and from `predict` on the test texts the share of answers that are not a path of the tree (must be 0);
under the dev-fitted abstain threshold of 90% coverage, how many texts the tree answers at the leaf, at the kind or
not at all. Writes OUTPUT/hierarchy_bench.json and .md; a finished run (OUTPUT/runs/NAME/results.json) is reused.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from few_shot_bench import ROOT, domain_task, machine, read_rows, run, train, write_rows  # noqa: E402

from bench.folder import bench_output  # noqa: E402

VARIANTS = {"flat": [], "tree": ["data.label_hierarchy=/"],
            "tree + level loss": ["data.label_hierarchy=/", "train.level_loss=1"]}
COVERAGE = 0.9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="out/hierarchy-bench")
    parser.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    with bench_output(args.output) as output:
        return bench(output, args)


def bench(output: Path, args) -> int:
    (output / "logs").mkdir(parents=True, exist_ok=True)
    flat = domain_task(output / "data" / "flat")
    tree = as_paths(flat, output / "data" / "tree")
    results = {"machine": machine(), "seeds": args.seeds, "coverage": COVERAGE, "variants": {}}
    for variant, overrides in VARIANTS.items():
        folder = flat if variant == "flat" else tree
        runs = [measure(output, f"{slug(variant)}-seed-{seed}", folder, overrides, seed, args.config)
                for seed in range(args.seeds)]
        results["variants"][variant] = {key: statistics.mean(r[key] for r in runs) for key in runs[0]}
        results["variants"][variant]["runs"] = runs
        print(json.dumps({variant: {k: v for k, v in results["variants"][variant].items() if k != "runs"}},
                         ensure_ascii=False), flush=True)
    (output / "hierarchy_bench.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    (output / "hierarchy_bench.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0


def as_paths(flat: Path, folder: Path) -> Path:
    """The flat task's files with each label written as kind/sentiment (酒店负面 -> 酒店/负面)."""
    for split in ("train", "dev", "test"):
        write_rows(folder / f"{split}.tsv", [(text, f"{label[:2]}/{label[2:]}")
                                             for text, label in read_rows(flat / f"{split}.tsv")])
    return folder


def measure(output: Path, name: str, data: Path, overrides: list[str], seed: int, config: str) -> dict:
    """One training of the task: its test scores, and what predict answers on the test texts."""
    settings = [f"data.train={data / 'train.tsv'}", f"data.dev={data / 'dev.tsv'}", f"data.test={data / 'test.tsv'}",
                "data.labels=null", f"seed={seed}", f"train.decision.target_coverage={COVERAGE}", *overrides]
    test = train(output, name, Path(config), settings)["test"]
    leaves = [label for _, label in read_rows(data / "test.tsv")]
    kinds = [label.replace("/", "")[:2] for label in leaves]
    answers = predicted(output, name, data / "test.tsv")
    labels = [a["label"] for a in answers]
    measured = {"leaf_accuracy": test["accuracy"],
                "kind_accuracy": statistics.mean(a.replace("/", "")[:2] == k for a, k in zip(labels, kinds)),
                "invalid_paths": sum(label not in set(leaves) | set(known_labels(output, name)) for label in labels)}
    if overrides:
        decision = test["decision"]["levels"]
        measured.update(answered_leaf=decision["answered_at_level"]["2"],
                        answered_kind=decision["answered_at_level"]["1"],
                        answered_none=decision["answered_at_no_level"], answers_right=decision["answers_right"],
                        valid_answers=statistics.mean(a["answer"] is None or a["answer"]["label"] in tree_nodes(labels)
                                                      for a in answers if "answer" in a))
    else:
        decision = test["decision"]
        measured.update(answered_leaf=decision["coverage"], answered_kind=0.0, answered_none=1 - decision["coverage"],
                        answers_right=decision["answered_accuracy"])
    return measured


def known_labels(output: Path, name: str) -> list[str]:
    return list(json.loads((output / "runs" / name / "best" / "label_map.json").read_text(encoding="utf-8")))


def tree_nodes(labels: list[str]) -> set[str]:
    return {part for label in labels for part in (label, label.split("/")[0])}


def predicted(output: Path, name: str, test: Path) -> list[dict]:
    folder = output / "runs" / name
    answers = folder / "test-answers.jsonl"
    if not answers.is_file():
        run(output, f"export-{name}", [sys.executable, "-m", "paddle_ft", "export", "--model", folder / "best",
                                       "--output", folder / "export", "--overwrite"])
        run(output, f"predict-{name}", [sys.executable, "-m", "paddle_ft", "predict", "--export", folder / "export",
                                        "--input", test, "--output-file", answers])
    return [json.loads(line) for line in answers.read_text(encoding="utf-8").splitlines()]


def slug(variant: str) -> str:
    return variant.replace(" + ", "-").replace(" ", "-")


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({', '.join(m['flags']) or 'no AVX-512'}); "
             f"mean of {results['seeds']} seeds; abstaining at the dev threshold of {results['coverage']:.0%} coverage",
             "", "| labels | leaf accuracy | kind accuracy | paths not in the tree | answered: leaf / kind / none | "
             "answers right |", "|---|---:|---:|---:|---:|---:|"]
    for variant, r in results["variants"].items():
        lines.append(f"| {variant} | {r['leaf_accuracy']:.4f} | {r['kind_accuracy']:.4f} | {r['invalid_paths']:.0f} | "
                     f"{r['answered_leaf']:.1%} / {r['answered_kind']:.1%} / {r['answered_none']:.1%} | "
                     f"{r['answers_right']:.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
