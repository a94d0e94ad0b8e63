"""The toolkit at the size users run it, on this machine: a bert-base-chinese-shaped encoder (12 x 768, a vocabulary
of 21,128, random weights) trained for a few steps through `train`, exported with parity, predicted at batch 1 and
served one request. Every other test uses a tiny model; this one measures the real size: peak memory, seconds per
step, export size, batch-1 latency. `python tools/full_size_smoke.py [--output DIR]`.
"""
from __future__ import annotations

import argparse
import json
import logging
import resource
import time
from pathlib import Path

from bench.corpus import write_corpus
from paddle_ft import runtime
from paddle_ft.arguments import ArgumentParser, positive_int
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.errors import UserError
from paddle_ft.artifacts.ownership import owned_folder

BERT_BASE = "12,768,12,3072"  # layers, hidden, heads, intermediate of bert-base-chinese
VOCAB_SIZE = 21128  # bert-base-chinese's vocabulary
MAX_LENGTH = 128


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(prog="full_size_smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="out/full-size-smoke", help="the folder to create (new or empty)")
    parser.add_argument("--shape", default=BERT_BASE, metavar="LAYERS,HIDDEN,HEADS,INTERMEDIATE")
    parser.add_argument("--vocab-size", type=positive_int, default=VOCAB_SIZE)
    parser.add_argument("--steps", type=positive_int, default=20)
    parser.add_argument("--batch-size", type=positive_int, default=8)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runtime.configure()  # before paddle is imported: threads, MKL on AMD
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per readiness poll is not the smoke's output
    try:
        layers, hidden, heads, intermediate = (int(x) for x in args.shape.split(","))
    except ValueError:
        raise UserError(f"--shape {args.shape}: give four integers, e.g. {BERT_BASE}") from None
    with owned_folder(args.output, "bench", "--output") as folder:
        # texts of 60-200 characters, so that most reach the 128 tokens
        data = write_corpus(folder / "data", max(64, args.steps * args.batch_size), 32, args.vocab_size, (60, 200))
        shape = [f"model.scratch.num_layers={layers}", f"model.scratch.hidden_size={hidden}",
                 f"model.scratch.num_heads={heads}", f"model.scratch.intermediate_size={intermediate}"]
        figures = {"shape": args.shape, "vocab_size": args.vocab_size, "max_length": MAX_LENGTH,
                   "batch_size": args.batch_size, "steps": args.steps}
        figures.update(_train(folder, data, shape, args.steps, args.batch_size))
        figures.update(_export_and_predict(folder))
        figures["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        (folder / "full_size.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    for name, value in figures.items():
        print(f"{name:28s} {value}")
    return 0


def _train(folder: Path, data: Path, shape: list[str], steps: int, batch_size: int) -> dict:
    from paddle_ft.workflows.training import train

    run = folder / "run"
    overrides = [f"output_dir={run}", f"data.train={data / 'train.tsv'}", f"data.dev={data / 'dev.tsv'}",
                 "data.test=null", f"data.max_length={MAX_LENGTH}", f"model.scratch.vocab_file={data / 'vocab.txt'}",
                 "model.scratch.max_position_embeddings=512", *shape, f"train.max_steps={steps}",
                 f"train.batch_size={batch_size}", "train.runtime.log_every=5", "train.checkpoints.every=0",
                 "train.optimizer.learning_rate=5e-5"]  # a bert-base fine-tuning's rate
    started = time.perf_counter()
    train(None, overrides)  # the defaults, a scratch encoder of this shape
    events = RunFiles(run).read_events("train")
    speeds = [e.values["samples_per_s"] for e in events][1:]  # the first interval warms up
    losses = [e.values["loss"] for e in events]
    return {"train_seconds": round(time.perf_counter() - started, 1), "loss_first_last": [losses[0], losses[-1]],
            "seconds_per_step": round(batch_size / (sum(speeds) / len(speeds)), 2) if speeds else None}


def _export_and_predict(folder: Path) -> dict:
    import httpx

    from paddle_ft.export import export_model
    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.inference.predictor import Predictor
    from bench.server_process import ServerProcess

    export = folder / "export"
    started = time.perf_counter()
    info = export_model(RunFiles(folder / "run").best_dir, export)
    figures = {"export_seconds": round(time.perf_counter() - started, 1),
               "export_mib": round(sum(p.stat().st_size for p in export.iterdir()) / 2**20),
               "parity_paddle": info.parity_max_abs_diff, "parity_onnx": info.parity_max_abs_diff_onnx}
    text = "".join(chr(0x4E00 + i) for i in range(40))
    for backend in ("onnxruntime", "paddle"):
        predictor = Predictor(export, PredictOptions(backend=backend))
        predictor.predict([text])
        times = []
        for _ in range(20):
            started = time.perf_counter()
            predictor.predict([text])
            times.append(time.perf_counter() - started)
        figures[f"batch1_ms_p50_{backend}"] = round(1000 * sorted(times)[len(times) // 2], 1)
        del predictor
    server = ServerProcess(export, folder / "server.log", "--threads", "2")
    try:
        answer = httpx.post(f"{server.url}/v1/classify", json={"texts": [text]}, timeout=60)
    finally:
        figures["server_exit"] = server.stop()
    figures["server_status"] = answer.status_code
    if answer.status_code != 200 or figures["server_exit"] != 0:
        raise UserError(f"the server answered {answer.status_code} and exited {figures['server_exit']}; see "
                        f"{folder / 'server.log'}")
    return figures
