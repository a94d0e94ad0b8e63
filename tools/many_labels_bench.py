"""Thousands of labels, measured: a synthetic corpus of 5,000 and 20,000 labels, single- and multi-label, through
train (with its report page), eval, export, predict and serve, each step's time and peak memory, in one run:

    python tools/many_labels_bench.py [--sizes 5000,20000] [--tasks single_label,multi_label]
                                      [--output out/many-labels-bench]

The corpus (tests/many_labels.py): label i is a pair of characters, its texts hold both among noise; train has
`ROWS_PER_LABEL` rows of each label, dev and test one each (20,000 dev texts at 20,000 labels). The model is a
1-layer, 64-wide encoder with mean pooling trained from scratch (`configs/demo-scratch.yaml` with `TRAIN`). Each step
runs as its own process; its peak resident memory is that process's (os.wait4), the server's is its VmHWM. Writes
OUTPUT/many_labels.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from many_labels import write_corpus  # noqa: E402

from bench.folder import bench_output  # noqa: E402

ROWS_PER_LABEL = {5000: 4, 20000: 4}
TRAIN = ["data.labels=null", "data.max_length=16", "model.pooling=mean", "model.scratch.hidden_size=64",
         "model.scratch.num_layers=1", "model.scratch.num_heads=2", "model.scratch.intermediate_size=128",
         "model.scratch.max_position_embeddings=16", "train.epochs=8", "train.batch_size=64",
         "train.optimizer.learning_rate=2e-3", "train.evaluation.every=0"]
SERVED_TEXTS = 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="out/many-labels-bench")
    parser.add_argument("--sizes", default="5000,20000")
    parser.add_argument("--tasks", default="single_label,multi_label")
    args = parser.parse_args()
    with bench_output(args.output) as output:
        return bench(output, args)


def bench(output: Path, args) -> int:
    (output / "logs").mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "cases": {}}
    for labels in map(int, args.sizes.split(",")):
        for task in args.tasks.split(","):
            name = f"{labels}-{task}"
            results["cases"][name] = case(output, name, labels, task)
            print(json.dumps({name: results["cases"][name]}, ensure_ascii=False), flush=True)
            (output / "many_labels.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    (output / "many_labels.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0


def case(output: Path, name: str, labels: int, task: str) -> dict:
    data = write_corpus(output / "data" / name, labels, {"train": ROWS_PER_LABEL.get(labels, 2), "dev": 1,
                                                          "test": 1}, multi=task == "multi_label")
    run_dir, export = output / "runs" / name, output / "runs" / name / "export"
    multi = ["task=multi_label", "train.evaluation.metric=micro_f1"] if task == "multi_label" else []
    settings = [f"output_dir={run_dir}", f"data.train={data / 'train.tsv'}", f"data.dev={data / 'dev.tsv'}",
                f"data.test={data / 'test.tsv'}", f"model.scratch.vocab_file={data / 'vocab.txt'}", *TRAIN, *multi]
    steps = {"train": measured(output, f"train-{name}", ["train", "-c", ROOT / "configs" / "demo-scratch.yaml",
                                                         *[x for s in settings for x in ("-o", s)]], fresh=run_dir)}
    steps["eval"] = measured(output, f"eval-{name}", ["eval", "--model", run_dir / "best", "--data",
                                                      data / "test.tsv"])
    steps["export"] = measured(output, f"export-{name}", ["export", "--model", run_dir / "best", "--output", export])
    steps["predict"] = measured(output, f"predict-{name}", ["predict", "--export", export, "--input",
                                                            data / "test.tsv", "--output-file", run_dir / "answers.jsonl"])
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["test"]
    evaluated = json.loads(steps["eval"].pop("stdout"))
    for step in steps.values():
        step.pop("stdout", None)
    answers = (run_dir / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    metric = "accuracy" if task == "single_label" else "micro_f1"
    return {"labels": labels, "task": task, "train_rows": labels * ROWS_PER_LABEL.get(labels, 2),
            "test_rows": len(answers), metric: results[metric], "eval_" + metric: evaluated[metric],
            "eval_output_bytes": len(json.dumps(evaluated, ensure_ascii=False)),
            "report_page_bytes": (run_dir / "report.html").stat().st_size,
            "predict_bytes_per_text": round(sum(map(len, answers)) / len(answers)),
            "export_megabytes": round(sum(f.stat().st_size for f in export.rglob("*") if f.is_file()) / 2 ** 20, 1),
            "steps": steps, "serve": served(output, name, export, data / "test.tsv")}


def measured(output: Path, name: str, command: list, fresh: Path | None = None) -> dict:
    """Seconds and peak resident memory (MB) of `python -m paddle_ft COMMAND` run as its own process."""
    import shutil

    if fresh is not None:
        shutil.rmtree(fresh, ignore_errors=True)
    started = time.perf_counter()
    with open(output / "logs" / f"{name}.log", "w", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-m", "paddle_ft", *map(str, command)], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=log, text=True)
        stdout = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"error: {name} failed; see {output / 'logs' / f'{name}.log'}")
    return {"seconds": round(time.perf_counter() - started, 1), "peak_megabytes": round(usage.ru_maxrss / 1024),
            "stdout": stdout}


def served(output: Path, name: str, export: Path, test: Path) -> dict:
    """The server on the export: ready time, one request of `SERVED_TEXTS` texts (latency, response size), its
    peak memory."""
    import httpx

    from bench.server_process import ServerProcess

    texts = [line.split("\t")[0] for line in test.read_text(encoding="utf-8").splitlines()[1:SERVED_TEXTS + 1]]
    started = time.perf_counter()
    server = ServerProcess(export, output / "logs" / f"serve-{name}.log", "--threads", "2")
    try:
        ready = time.perf_counter() - started
        httpx.post(f"{server.url}/v1/classify", json={"texts": texts[:1]}, timeout=120)  # warm
        started = time.perf_counter()
        response = httpx.post(f"{server.url}/v1/classify", json={"texts": texts}, timeout=120)
        latency = time.perf_counter() - started
        status = Path(f"/proc/{server.process.pid}/status").read_text()
        peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
    finally:
        server.stop()
    response.raise_for_status()
    return {"ready_seconds": round(ready, 1), "request_ms": round(latency * 1000), "texts": len(texts),
            "response_bytes_per_text": round(len(response.content) / len(texts)), "peak_megabytes": round(peak / 1024)}


def machine() -> dict:
    from paddle_ft import runtime

    return {"cpu": runtime.cpu_model(), "flags": runtime.cpu_speed_flags(), "cores": runtime.usable_cores()}


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({', '.join(m['flags']) or 'no AVX-512'})", "",
             "| labels | task | train rows | test score | train (s / MB) | eval (s / MB) | export (s / MB, size) | "
             "predict (s / MB, bytes per text) | serve 32 texts (ms / MB, bytes per text) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["cases"].values():
        s, score = r["steps"], r.get("accuracy", r.get("micro_f1"))
        lines.append(f"| {r['labels']:,} | {r['task']} | {r['train_rows']:,} | {score:.4f} | "
                     f"{s['train']['seconds']} / {s['train']['peak_megabytes']} | "
                     f"{s['eval']['seconds']} / {s['eval']['peak_megabytes']} | "
                     f"{s['export']['seconds']} / {s['export']['peak_megabytes']}, {r['export_megabytes']} MB | "
                     f"{s['predict']['seconds']} / {s['predict']['peak_megabytes']}, {r['predict_bytes_per_text']} | "
                     f"{r['serve']['request_ms']} / {r['serve']['peak_megabytes']}, "
                     f"{r['serve']['response_bytes_per_text']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
