"""`make gpu-check`: the GPU acceptance run, in one command, with nothing but the image and the installed package
(it writes its own synthetic corpora). It fails (exit 1) when a check fails, and when there is no GPU at all.

On one GPU, a 4 x 256 model on a learnable corpus: training in fp32, fp16 O1/O2 and bf16 O1/O2 (where the GPU has
them) reaching dev accuracy 0.9; an exact resume of the O2 run after SIGTERM; every other GPU path for a few steps,
its loss finite and falling (accumulation under O1 and O2, recompute, masked-LM and ELECTRA pretraining,
distillation); export of the fp32 and of the O2-trained model with parity on the GPU; `Predictor` on GPU fp32 / fp16
against the CPU predictor (TensorRT: a skip saying why, as Paddle 3 exports cannot use it yet); the server on the GPU
answering as the CPU predictor does. Then at bert-base's shape (12 x 768, vocabulary 21,128, 128 tokens, batch 128):
the AMP table (fp32 with TF32 off and on, fp16 and bf16 at O1 and O2: samples/s, host ms a step queueing and waiting,
peak GPU memory and its activations), asserting that AMP trains >= 1.3x as fast as fp32 with TF32 off and >= 1.1x
with it on, with <= 0.75x its activation memory and healthy rows (`amp_verdict`); fp16 O2's profile at batch 32 and
128 (`profile_check`); with `--batch-search` the largest batch by bisection within a time budget.
With 2+ GPUs: `--gpus 0,1` ends at one process's weights and trains bert-base >= 1.8x as fast over NVLink, >= 1.6x
over PCIe (`scaling_floor`); one rank killed by SIGKILL, then resumed to the same weights (`killed_rank_check`).
It prints its plan
and an estimate of its time first (about 10 minutes on one H100-class GPU), then a pass/fail/skip table, and writes
`gpu_check.json`; every skip says why. `--device cpu` runs the plumbing on a CPU (fp32 only, tiny shapes, and the
2-process and killed-rank checks as 2 gloo processes).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.corpus import write_corpus
from bench.search import ProbeFailed, is_out_of_memory, largest_batch
from paddle_ft.artifacts.export_folder import EXPORT_INFO, read_export_info
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.inference.options import PredictOptions

PRECISIONS = {"fp32": ["train.amp.enabled=false"], "fp16-O1": ["train.amp.enabled=true", "train.amp.dtype=float16", "train.amp.level=O1"],
              "fp16-O2": ["train.amp.enabled=true", "train.amp.dtype=float16", "train.amp.level=O2"],
              "bf16-O1": ["train.amp.enabled=true", "train.amp.dtype=bfloat16", "train.amp.level=O1"],
              "bf16-O2": ["train.amp.enabled=true", "train.amp.dtype=bfloat16", "train.amp.level=O2"]}
# the AMP table's rows at bert-base's shape: fp32 twice, as TF32 (on in Paddle 3.3 by default) changes what AMP is
# compared with
AMP_ROWS = {"fp32 TF32 off": ["train.amp.tf32=false"], "fp32 TF32 on": ["train.amp.tf32=true"],
            **{name.replace("-", " "): overrides for name, overrides in PRECISIONS.items() if name != "fp32"}}
AMP_SPEED_FLOOR, AMP_TF32_FLOOR, AMP_MEMORY_CEILING, TWO_GPU_SCALING_FLOOR = 1.3, 1.1, 0.75, 1.8
PCIE_SCALING_FLOOR = 1.6  # 2 GPUs without NVLink (scaling_floor)
MAX_SKIPPED = 0.02  # a row skipping this share of its steps after the first log window is no measurement
# a predictor's largest probability difference from the CPU predictor: Paddle Inference computes fp32 GEMMs on a GPU
# in TF32 (a 10-bit mantissa), as the export's own GPU parity allows (1e-2); fp16 to 2e-2; the CPU itself to 1e-4
PREDICTOR_BOUNDS = {"cpu": 1e-4, "fp32": 1e-2, "fp16": 2e-2}
# the bert-base runs. The AMP table runs at a per-GPU batch of 128: at 32, an H100's step is likely shorter than the
# host's eager dispatch of it (~200 AdamW updates, ~600 clip ops: ~11 ms), so AMP against fp32 would measure Python.
# fp16 O2 also runs at 32, for the profile (host time against the time spent waiting for the GPU, at both batches).
BERT_STEPS, BERT_BATCH, PROFILE_BATCH, BERT_LOG_EVERY, BATCH_SEARCH_SECONDS = 20, 128, 32, 5, 150
HOST_BOUND_SHARE = 0.1  # a step whose host waits less than this share of it for the GPU: the GPU is starved
SEARCH_ROWS = 4096  # the batch search's file: no probe asks for more rows than it holds
# minutes of each part on one H100-class GPU, estimated from its runs' shapes and steps (printed at the start)
ESTIMATE_SECONDS = {"small": 240, "paths": 120, "bert-base": 240, "two GPUs": 90, "batch search": 300}
# cuBLAS/cuDNN pick among algorithms per run unless told not to: the exact-resume check needs one
RECIPE = "recipe.yaml"  # the check's own training config, in its data folder
DETERMINISTIC = {"FLAGS_cudnn_deterministic": "1", "FLAGS_embedding_deterministic": "1"}


@dataclass
class Check:
    name: str
    status: str  # pass | fail | skip
    detail: str
    numbers: dict = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="out/gpu_check",
                        help="work folder: new, empty, or an earlier gpu-check's (which is replaced)")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="cpu: the plumbing only, fp32")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per training run")
    parser.add_argument("--batch-search", action="store_true",
                        help="also find the largest bert-base batch of fp32 and fp16 O1 (about 5 more minutes)")
    args = parser.parse_args(argv)
    import shutil

    import paddle

    gpus = paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0
    if args.device == "gpu" and gpus == 0:  # a GPU check that checked nothing is no pass
        build = "a CUDA build" if paddle.is_compiled_with_cuda() else "the CPU build, without CUDA"
        print(f"error: no CUDA GPU found (paddle {paddle.__version__}, {build}): gpu-check checked nothing; run it "
              "where nvidia-smi lists a GPU with paddle's GPU build (the official Paddle GPU image, or "
              "pip install '.[gpu]' --extra-index-url https://www.paddlepaddle.org.cn/packages/stable/cu126/), or pass "
              "--device cpu for the plumbing only", file=sys.stderr)
        return 1
    work = Path(args.output)
    if work.exists() and any(work.iterdir()) and not (work / "data" / RECIPE).is_file():
        # only an earlier gpu-check folder (its corpus is written first) is ever deleted
        print(f"error: --output {work} holds files gpu-check did not write; give a new folder", file=sys.stderr)
        return 2
    shutil.rmtree(work, ignore_errors=True)
    config = write_recipe(work / "data", args.steps)
    print(plan(args.device, gpus, args.batch_search), flush=True)
    checks = run_checks(work, config, args.device, gpus, args.batch_search)
    report(checks, work / "gpu_check.json")
    return 1 if any(c.status == "fail" for c in checks) else 0


def plan(device: str, gpus: int, batch_search: bool) -> str:
    """What the run will do and about how long it takes on one H100-class GPU (`ESTIMATE_SECONDS`: estimates from
    the shapes and step counts, not measured on such a GPU yet)."""
    parts = ["small", "paths"] + (["bert-base"] if device == "gpu" else []) + (["two GPUs"] if gpus >= 2 else []) + (
        ["batch search"] if batch_search and device == "gpu" else [])
    total = sum(ESTIMATE_SECONDS[part] for part in parts)
    return (f"gpu-check on {device} ({gpus} GPU(s)): " + ", ".join(f"{part} ~{ESTIMATE_SECONDS[part] // 60:g} min"
                                                                    for part in parts)
            + f"; about {total / 60:.0f} minutes in all on an H100-class GPU (an estimate). In its order: "
            + "; ".join(CHECKED_FIRST))


# what the acceptance run checks, in its order (docs/operations.md)
CHECKED_FIRST = ("the cuBLAS TF32 switch before and after paddle_ft's settings",
                 "every precision trained, the O2 run resumed bit for bit",
                 "every GPU path under AMP, the prototype head and mean pooling under fp16 O2 among them",
                 "export, predictors and the server against the CPU",
                 "bert-base's AMP table at batch 128 with every row's skipped steps and host time",
                 "bert-base fp16 O2's host time against waiting for the GPU at batch 32 and 128",
                 "2 GPUs against one, plain and with fp16 O2 and accumulation 2",
                 "a kill -9 of one of 2 ranks, then train.resume=auto to the uninterrupted job's weights")


def run_checks(work: Path, config: Path, device: str, gpus: int, batch_search: bool = False) -> list[Check]:
    checks = [environment(device, gpus)]
    base = ["--config", str(config)]
    runs = {}
    for name, overrides in PRECISIONS.items():
        unsupported = precision_unsupported(name, device)
        if unsupported:
            checks.append(Check(f"train {name}", "skip", unsupported))
            continue
        out = work / f"train-{name}"
        checks.append(train_check(name, out, base + overrides, device))
        runs[name] = out
    resumed = "fp16-O2" if "fp16-O2" in runs else "fp32"
    checks.append(resume_check(resumed, runs[resumed], work / f"resume-{resumed}", base + PRECISIONS[resumed], device))
    checks.append(o2_gradient_dtype_check(device))
    checks += path_checks(work, config, runs, device)
    export = work / "export"
    checks.append(command_check("export fp32", ["export", "--model", str(RunFiles(runs["fp32"]).best_dir), "--output",
                                                str(export)], device, lambda: export_parity(export)))
    if "fp16-O2" in runs:  # an O2 run saves float32 weights: its export must be an ordinary float32 program
        o2 = work / "export-fp16-O2"
        checks.append(command_check("export of the O2-trained model", ["export", "--model", str(RunFiles(runs["fp16-O2"]).best_dir),
                                                                       "--output", str(o2)], device,
                                    lambda: export_parity(o2)))
    checks += predictor_checks(export, config.parent, device)
    checks.append(serving_check(export, config.parent, device, work / "serve.log"))
    if device == "gpu":
        checks += bert_base_checks(work / "bert-base", gpus, batch_search)
    else:
        checks.append(Check("bert-base AMP table", "skip", "AMP and GPU memory need a GPU (make bench: the CPU rows)"))
    import paddle

    if gpus >= 2 or (device == "cpu" and not paddle.is_compiled_with_cuda()):
        # on a CPU: 2 gloo processes, the same comparison (the O2 row a skip: no fp16 AMP on a CPU)
        checks += [two_process_check(work, base, device, row) for row in TWO_PROCESS_ROWS]
        checks.append(killed_rank_check(work / "killed-rank", base, device))
    elif device == "cpu":
        checks.append(Check("2-process gloo on the CPU", "skip", "a CUDA build's launcher puts its ranks on GPUs: "
                            "the CPU plumbing runs with the CPU build"))
    else:
        checks.append(Check("2-process --gpus 0,1", "skip", f"{gpus} GPU(s) visible; needs 2"))
    return checks


def precision_unsupported(name: str, device: str) -> str | None:
    """Why this precision cannot run here, or None."""
    import paddle

    if name.startswith("fp32"):
        return None
    if device == "cpu":
        return "AMP is a GPU matter (Paddle turns it off on CPU)"
    kind = name.split("-")[0].split(" ")[0]
    supported = {"fp16": paddle.amp.is_float16_supported, "bf16": paddle.amp.is_bfloat16_supported}[kind]
    return None if supported("gpu:0") else f"{kind} is not supported on this GPU (paddle_ft refuses it)"


def o2_gradient_dtype_check(device: str) -> Check:
    """O2 keeps float16 weights and float32 gradients (master_grad): two accumulated micro-batches are summed in
    float32. Paddle's decorate does nothing on a CPU, so only a GPU can show it."""
    import paddle

    from paddle_ft.config import AmpConfig
    from paddle_ft.engine.amp import StepRunner

    name = "O2 gradients in float32 (accumulation)"
    unsupported = precision_unsupported("fp16-O2", device)
    if unsupported:
        return Check(name, "skip", unsupported)
    model = paddle.nn.Sequential(paddle.nn.Linear(64, 64), paddle.nn.LayerNorm(64), paddle.nn.Linear(64, 2))
    runner = StepRunner(AmpConfig(enabled=True, level="O2", dtype="float16"), 1.0)
    model, _ = runner.prepare(model, paddle.optimizer.AdamW(parameters=model.parameters()))
    for _ in range(2):
        with runner.autocast():
            loss = model(paddle.randn([8, 64])).astype("float32").mean()
        runner.backward(loss)
    weights = sorted({str(p.dtype) for p in model.parameters()})
    gradients = sorted({str(p.grad.dtype) for p in model.parameters() if p.grad is not None})
    ok = gradients == ["paddle.float32"] and "paddle.float16" in weights
    return Check(name, "pass" if ok else "fail", f"weights {weights}, gradients {gradients}")


def path_checks(work: Path, config: Path, runs: dict, device: str) -> list[Check]:
    """Every other GPU path, a few steps each under AMP (fp32 on a CPU): loss finite and falling."""
    o1 = PRECISIONS["fp16-O1"] if "fp16-O1" in runs else []
    o2 = PRECISIONS["fp16-O2"] if "fp16-O2" in runs else []
    few = ["output_dir=OUT", "train.max_steps=60", "train.runtime.log_every=5"]
    corpus = work / "data" / "corpus.txt"
    corpus.write_text("\n".join(line.split("\t")[0] for line in
                                (config.parent / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]) + "\n",
                      encoding="utf-8")
    pretraining = [f"pretrain.corpus=[{corpus}]", "data.train=null", "data.dev=null", "data.test=null"]
    paths = {
        "accumulation x4 under O1": ("train", [*o1, "train.accumulate_steps=4"]),
        "accumulation x2 under O2 (float32 gradients)": ("train", [*o2, "train.accumulate_steps=2"]),
        "recompute under O1": ("train", [*o1, "train.runtime.recompute=true"]),
        "pretrain masked-LM under O1": ("pretrain", [*o1, *pretraining, "train.evaluation.metric=masked_accuracy"]),
        "pretrain ELECTRA under O2": ("pretrain", [*o2, *pretraining, "pretrain.objective=electra",
                                                  "train.evaluation.metric=replaced_f1"]),
        "distill under O1": ("distill", [*o1, "model.scratch.num_layers=1"]),
        # the head and mean pooling run in float32 under an autocast, and O2 keeps the head's weights float32
        "prototype head and mean pooling under O2": ("train", [*o2, "model.head=prototype", "model.pooling=mean"]),
    }
    checks = []
    for name, (command, overrides) in paths.items():
        out = work / ("path-" + "".join(c if c.isalnum() else "-" for c in name.split(" (")[0]))
        arguments = [command, "--config", str(config)]
        if command == "distill":
            arguments += ["--teacher", str(RunFiles(runs["fp32"]).best_dir)]
        for override in [*few, *overrides]:
            arguments += ["-o", override.replace("OUT", str(out))]
        check = command_check(name, arguments, device, lambda out=out: loss_trend(out), env=DETERMINISTIC)
        if check.status == "pass" and not check.numbers["falling"]:
            check.status, check.detail = "fail", f"loss not finite and falling: {check.numbers['losses']}"
        checks.append(check)
    return checks


def loss_trend(run: Path) -> dict:
    """The logged training losses of a run (first, last) and whether they are finite and fell."""
    import math

    losses = [e.values["loss"] for e in RunFiles(run).read_events("train")]
    finite = bool(losses) and all(x is not None and math.isfinite(x) for x in losses)
    return {"losses": [losses[0], losses[-1]] if losses else [], "falling": finite and losses[-1] < losses[0]}


def export_parity(export: Path) -> dict:
    info = read_export_info(export)
    return {key: value for key, value in info.as_dict().items() if key.startswith("parity")}


def serving_check(export: Path, data: Path, device: str, log: Path) -> Check:
    """`paddle_ft serve` on the device: ready, answers as the CPU predictor does, drains on SIGTERM and exits 0."""
    import httpx
    import numpy as np


    from paddle_ft.inference.predictor import Predictor, stack_probabilities
    from bench.server_process import ServerProcess

    if not (export / EXPORT_INFO).is_file():
        return Check(f"serve on {device}", "skip", "no export to serve (the export check failed)")
    texts = [line.split("\t")[0] for line in (data / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:33]]
    reference = Predictor(export, PredictOptions(cpu_threads=2))
    expected = stack_probabilities(reference.predict(texts))  # columns in reference.labels' order
    try:
        server = ServerProcess(export, log, "--device", device)
    except RuntimeError as exc:
        return Check(f"serve on {device}", "fail", f"never ready: {exc}")
    try:
        answer = httpx.post(f"{server.url}/v1/classify", json={"texts": texts}, timeout=120)
    finally:
        code = server.stop()
    if answer.status_code != 200 or code != 0:
        return Check(f"serve on {device}", "fail", f"HTTP {answer.status_code}, exit {code} after SIGTERM; see {log}")
    served = np.array([[r["probabilities"][label] for label in reference.labels] for r in answer.json()["results"]])
    diff = float(np.abs(served - expected).max())
    return Check(f"serve on {device}", "pass" if diff <= 1e-3 else "fail",
                 f"{len(texts)} texts, max prob diff from the CPU predictor {diff:.2g} (bound 1e-3), exit 0 on SIGTERM",
                 {"max_prob_diff": diff})


def amp_verdict(rows: dict) -> Check:
    """AMP against fp32 at a batch of BERT_BATCH: the fastest AMP row >= AMP_SPEED_FLOOR x fp32's samples/s with TF32
    off **and** >= AMP_TF32_FLOOR x with TF32 on (what an Ampere+ GPU gives fp32 for free); the leanest AMP row's
    activations (peak memory less the weights, gradients and optimizer state after the first step, which O2's float32
    master copies make larger) <= AMP_MEMORY_CEILING x fp32's. Every row must have finite losses and skip fewer than
    MAX_SKIPPED of its steps (a fast row that diverged is no pass). Where a compared row is host-bound (its host
    hardly waited for the GPU), the speeds measured Python's dispatch, not AMP: the speed floors are not judged (a
    skip, said), the memory and health ones still are. Every ratio is said, whatever the verdict."""
    title = (f"bert-base AMP >= {AMP_SPEED_FLOOR}x fp32 (TF32 off), >= {AMP_TF32_FLOOR}x (TF32 on), activations "
             f"<= {AMP_MEMORY_CEILING}x, batch {BERT_BATCH}")
    off, on = rows.get("fp32 TF32 off", {}), rows.get("fp32 TF32 on", {})
    amp = {name: row for name, row in rows.items() if not name.startswith("fp32") and row.get("samples_per_s")}
    if not off.get("samples_per_s") or not on.get("samples_per_s") or not amp:
        return Check(title, "fail", "rows without numbers: "
                     + ", ".join(name for name in AMP_ROWS if not rows.get(name, {}).get("samples_per_s")))
    unhealthy = [f"{name} (losses finite: {row['finite']}, {row['skipped_share']:.1%} of steps skipped)"
                 for name, row in rows.items() if not row["finite"] or row["skipped_share"] >= MAX_SKIPPED]
    fastest = max(amp, key=lambda name: amp[name]["samples_per_s"])
    leanest = min(amp, key=lambda name: amp[name]["activation_mib"])
    numbers = {"fastest": fastest, "speedup_tf32_off": amp[fastest]["samples_per_s"] / off["samples_per_s"],
               "speedup_tf32_on": amp[fastest]["samples_per_s"] / on["samples_per_s"], "leanest": leanest,
               "activation_ratio": amp[leanest]["activation_mib"] / max(off["activation_mib"], 1)}
    host_bound = [name for name in ("fp32 TF32 off", "fp32 TF32 on", fastest) if is_host_bound(rows[name])]
    fast_enough = (numbers["speedup_tf32_off"] >= AMP_SPEED_FLOOR and numbers["speedup_tf32_on"] >= AMP_TF32_FLOOR)
    healthy = not unhealthy and numbers["activation_ratio"] <= AMP_MEMORY_CEILING
    skips = ", ".join(f"{name} {row['skipped_share']:.1%}" for name, row in rows.items())
    detail = (f"{fastest} {numbers['speedup_tf32_off']:.2f}x the samples/s of fp32 with TF32 off, "
              f"{numbers['speedup_tf32_on']:.2f}x with TF32 on; {leanest} {numbers['activation_ratio']:.2f}x its "
              f"activation memory; steps skipped after the first window: {skips}; host ms a step (waiting for the "
              "GPU): " + ", ".join(f"{name} {row['host_ms']:.0f} ({row['waiting_ms']:.0f})" for name, row in rows.items())
              + (f"; unhealthy rows: {', '.join(unhealthy)}" if unhealthy else ""))
    if host_bound and healthy:
        return Check(title, "skip", f"speed not judged: {', '.join(host_bound)} host-bound (the GPU waited for "
                     f"Python's dispatch: a larger batch measures AMP); {detail}", numbers)
    return Check(title, "pass" if healthy and fast_enough else "fail", detail, numbers)


def is_host_bound(row: dict) -> bool:
    """The host waited for the GPU less than HOST_BOUND_SHARE of the step: the GPU idles between the kernels the
    host queues, so the step's time is the host's, whatever the GPU could do."""
    return row["waiting_ms"] < HOST_BOUND_SHARE * (row["host_ms"] + row["waiting_ms"])


def profile_check(rows: dict[int, dict]) -> Check:
    """fp16 O2 at each batch (rows: batch -> speed_and_memory's numbers): a step's time split into the host queueing
    it and the host waiting for the GPU to finish it, and which of the two bounds it."""
    title = "bert-base fp16 O2: host time against waiting for the GPU, per step"
    missing = [str(batch) for batch in (PROFILE_BATCH, BERT_BATCH) if batch not in rows]
    if missing:
        return Check(title, "fail", f"no fp16 O2 row at batch {', '.join(missing)}")
    parts = [f"batch {batch}: {row['host_ms'] + row['waiting_ms']:.0f} ms a step, the host {row['host_ms']:.0f} ms "
             f"queueing it and {row['waiting_ms']:.0f} ms waiting for the GPU "
             f"({'host-bound' if is_host_bound(row) else 'GPU-bound'})" for batch, row in sorted(rows.items())]
    return Check(title, "pass", "; ".join(parts), {str(batch): row for batch, row in rows.items()})


def bert_base_checks(folder: Path, gpus: int, batch_search: bool = False) -> list[Check]:
    """At bert-base's shape: the AMP table at BERT_BATCH with its assertion, fp16 O2 at PROFILE_BATCH too (the
    profile), and with `batch_search` the largest batch of fp32 and fp16 O1. A row measures: no dev, no checkpoint
    (train.checkpoints.keep 0), best/ written once at its end."""
    from bench.full_size import BERT_BASE, MAX_LENGTH, VOCAB_SIZE

    data = write_corpus(folder / "data", BERT_STEPS * BERT_BATCH * max(gpus, 1), 32, VOCAB_SIZE, (60, 200))
    layers, hidden, heads, intermediate = BERT_BASE.split(",")
    recipe = folder / "bert-base.yaml"  # everything is an override below: the recipe holds the seed only
    recipe.write_text("seed: 42\n", encoding="utf-8")
    common = [f"data.train={data / 'train.tsv'}", "data.dev=null", "data.test=null", "train.checkpoints.keep=0",
              f"data.max_length={MAX_LENGTH}", "data.group_by_length=false", "model.backbone=null",
              f"model.scratch.vocab_file={data / 'vocab.txt'}", f"model.scratch.num_layers={layers}",
              f"model.scratch.hidden_size={hidden}", f"model.scratch.num_heads={heads}",
              f"model.scratch.intermediate_size={intermediate}", "model.scratch.max_position_embeddings=512",
              "train.checkpoints.every=0", f"train.runtime.log_every={BERT_LOG_EVERY}",
              "train.optimizer.learning_rate=5e-5"]

    def row_check(name: str, batch: int) -> Check:
        out = folder / f"{name.replace(' ', '-')}-batch-{batch}"
        return command_check(f"bert-base {name} batch {batch}",
                             train_command(out, ["--config", str(recipe), *common, *AMP_ROWS[name],
                                                 f"train.max_steps={BERT_STEPS}", f"train.batch_size={batch}"]),
                             "gpu", lambda: speed_and_memory(out))

    rows, checks = {}, []
    for name in AMP_ROWS:
        unsupported = precision_unsupported(name, "gpu")
        if unsupported:
            checks.append(Check(f"bert-base {name}", "skip", unsupported))
            continue
        checks.append(row_check(name, BERT_BATCH))
        if checks[-1].status == "pass":
            rows[name] = checks[-1].numbers
    checks.append(amp_verdict(rows))
    checks.append(row_check("fp16 O2", PROFILE_BATCH))
    profiled = {batch: numbers for batch, numbers in ((PROFILE_BATCH, checks[-1].numbers),
                                                      (BERT_BATCH, rows.get("fp16 O2"))) if numbers}
    checks.append(profile_check(profiled))
    search = write_corpus(folder / "search-data", SEARCH_ROWS, 32, VOCAB_SIZE, (60, 200)) if batch_search else None
    for name in ("fp32 TF32 off", "fp16 O1"):
        if name in rows and search is not None:
            checks.append(batch_search_check(folder / f"largest-{name.replace(' ', '-')}",
                                             ["--config", str(recipe), *common, *AMP_ROWS[name],
                                              f"data.train={search / 'train.tsv'}"], name, SEARCH_ROWS))
    (folder / "amp.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    if gpus >= 2:
        checks.append(two_gpu_scaling_check(folder, ["--config", str(recipe), *common], rows))
    else:
        checks.append(Check("bert-base 2 GPUs against one", "skip", f"{gpus} GPU visible; needs 2"))
    return checks


def speed_and_memory(run: Path) -> dict:
    """From metrics.jsonl, after the first log interval (warm-up): mean samples/s, and host ms a step queueing work
    and waiting for the GPU; peak GPU memory, and of it the activations (the peak less what the first optimizer
    step left allocated: weights, gradients, optimizer state); whether every logged loss is finite and the share of
    steps skipped."""
    import math

    events = RunFiles(run).read_events("train")
    measured = events[1:] or events

    def mean(key: str) -> float:
        return round(sum(e.values[key] for e in measured) / len(measured), 1)

    peak = max(e.values.get("gpu_memory_peak_mib", 0) for e in events)
    state = events[0].values.get("gpu_memory_after_first_step_mib", 0)
    return {"samples_per_s": mean("samples_per_s"), "host_ms": mean("host_ms_per_step"),
            "waiting_ms": mean("waiting_ms_per_step"), "peak_mib": peak, "activation_mib": peak - state,
            "finite": all(e.values["loss"] is not None and math.isfinite(e.values["loss"]) for e in events),
            "skipped_share": skipped_after_warm_up(events)}


def skipped_after_warm_up(events: list) -> float:
    """The share of steps the loss scaler skipped after the first log window: float16's scaler starts at 2^15 and
    halves on each overflow, so a few skips in the first steps are it finding its scale (one of 40 failed the whole
    AMP verdict); skips after them are overflows of a run that diverges."""
    if len(events) < 2:
        return events[-1].values["skipped_steps"] / max(events[-1].step, 1) if events else 0.0
    first, last = events[0], events[-1]
    return (last.values["skipped_steps"] - first.values["skipped_steps"]) / max(last.step - first.step, 1)


def batch_search_check(folder: Path, arguments: list[str], name: str, rows: int, device: str = "gpu",
                       start: int = PROFILE_BATCH, budget_seconds: float = BATCH_SEARCH_SECONDS) -> Check:
    """Two optimizer steps at a batch, in a process of its own (an out-of-memory error leaves a process unusable).
    `arguments` train on a file of `rows` rows: no probe asks for more (a batch larger than the file would train on
    the file, and "fit" without ever holding the batch it names), and each probe's plan must show the whole batch."""
    def fits(batch: int) -> bool:
        out = folder / f"batch-{batch}"
        process = paddle_ft(train_command(out, [*arguments, "train.max_steps=2",
                                                f"train.batch_size={batch}", "data.dev=null"]), device)
        code, stderr = finished(process)
        if code != 0 and not is_out_of_memory(stderr):
            raise ProbeFailed(stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {code}")
        if code == 0:
            plan = RunFiles(out).read_events("plan")[0].values
            if min(plan["train_examples"], plan["effective_batch_size"]) < batch:
                raise ProbeFailed(f"the probe of batch {batch} trained on batches of "
                                  f"{min(plan['train_examples'], plan['effective_batch_size'])}")
        return code == 0

    started = time.monotonic()
    fit, unfit, failure = largest_batch(fits, start, budget_seconds, cap=rows)
    if failure:
        return Check(f"bert-base largest batch {name}", "fail",
                     f"a probe failed for another reason than memory: {failure}")
    bracket = f"{unfit} did not" if unfit else f"nothing failed up to {fit} (the {rows} rows probed with)"
    return Check(f"bert-base largest batch {name}", "pass" if fit >= start else "fail",
                 f"{fit} fits, {bracket} ({time.monotonic() - started:.0f} s of a {budget_seconds:g} s budget)",
                 {"largest_batch": fit, "first_unfit": unfit})


def write_recipe(folder: Path, steps: int) -> Path:
    """The learnable corpus (bench.corpus) in `folder`, and the recipe that trains a 4-layer, 256-wide BERT on it
    (returned)."""
    import yaml

    write_corpus(folder, 4000, 400)
    recipe = {"data": {"train": str(folder / "train.tsv"), "dev": str(folder / "dev.tsv"), "max_length": 64,
                       "cache_dir": None},
              "model": {"scratch": {"vocab_file": str(folder / "vocab.txt"), "hidden_size": 256, "num_layers": 4,
                                    "num_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 128}},
              "train": {"max_steps": steps, "batch_size": 32, "optimizer": {"learning_rate": 5e-4},
                        "runtime": {"log_every": 20}, "evaluation": {"every": steps // 3},
                        "checkpoints": {"every": 50}}}
    (folder / RECIPE).write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return folder / RECIPE


def environment(device: str, gpus: int) -> Check:
    import paddle

    from paddle.base import core

    from paddle_ft.config import AmpConfig
    from paddle_ft.engine.amp import set_tf32

    before = core.get_cublas_switch()
    set_tf32(AmpConfig().tf32)  # what a run with the default config applies: Paddle's own switch, left as it is
    numbers = {"paddle": paddle.__version__, "cuda_build": paddle.is_compiled_with_cuda(), "gpus": gpus,
               "tf32": f"{'on' if before else 'off'} before paddle_ft's default settings, "
                       f"{'on' if core.get_cublas_switch() else 'off'} after"}
    if device == "gpu":
        numbers.update(name=paddle.device.cuda.get_device_name(0),
                       capability=".".join(map(str, paddle.device.cuda.get_device_capability(0))),
                       tensorrt=".".join(map(str, paddle.inference.get_trt_compile_version())))
    return Check("environment", "pass", ", ".join(f"{k} {v}" for k, v in numbers.items()), numbers)


def paddle_ft(command: list[str], device: str, env: dict | None = None, **popen) -> subprocess.Popen:
    """`python -m paddle_ft COMMAND` on the chosen device (CUDA_VISIBLE_DEVICES="" hides the GPUs for cpu)."""
    env = {**os.environ, **(env or {}), **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {})}
    return subprocess.Popen([sys.executable, "-m", "paddle_ft", *command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def finished(process: subprocess.Popen, timeout: float = 1800) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr


def command_check(name: str, command: list[str], device: str, numbers=lambda: {}, env=None) -> Check:
    started = time.perf_counter()
    code, stderr = finished(paddle_ft(command, device, env))
    seconds = round(time.perf_counter() - started, 1)
    if code != 0:
        return Check(name, "fail", f"exit {code}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}")
    return Check(name, "pass", f"{seconds} s", {"seconds": seconds, **numbers()})


def train_check(name: str, out: Path, overrides: list[str], device: str) -> Check:
    check = command_check(f"train {name}", train_command(out, overrides), device,
                          lambda: {"dev_accuracy": RunFiles(out).read_results().dev["accuracy"],
                                   "samples_per_s": last_speed(out)}, env=DETERMINISTIC)
    if check.status == "pass" and check.numbers["dev_accuracy"] < 0.9:
        check.status, check.detail = "fail", f"dev accuracy {check.numbers['dev_accuracy']:.3f} < 0.9 (did it learn?)"
    return check


def train_command(out: Path, arguments: list[str]) -> list[str]:
    """`train --config C` plus `-o` for output_dir and every KEY=VALUE in `arguments`."""
    config, overrides = arguments[:2], arguments[2:]
    return ["train", *config, *[x for o in [f"output_dir={out}", *overrides] for x in ("-o", o)]]


def last_speed(out: Path) -> float | None:
    speeds = [e.values["samples_per_s"] for e in RunFiles(out).read_events("train")]
    return round(speeds[-1], 1) if speeds else None


def resume_check(name: str, whole: Path, broken: Path, overrides: list[str], device: str) -> Check:
    """SIGTERM a run of the same recipe mid-way, resume it, and compare every weight with the whole run."""
    import numpy as np

    process = paddle_ft(train_command(broken, overrides), device, DETERMINISTIC)
    deadline = time.time() + 1800
    while process.poll() is None and time.time() < deadline and not list(broken.glob("checkpoints/step-*")):
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    code, stderr = finished(process)
    if code not in (0, 128 + signal.SIGTERM):
        return Check(f"resume {name}", "fail", f"the interrupted run exited {code}: {stderr.strip()[-300:]}")
    check = command_check(f"resume {name}", train_command(broken, overrides + ["train.resume=auto"]), device,
                          env=DETERMINISTIC)
    if check.status != "pass":
        return check
    from paddle_ft.artifacts.bundle import read_weights

    a, b = read_weights(RunFiles(whole).best_dir), read_weights(RunFiles(broken).best_dir)
    worst = max(float(np.abs(a[k].numpy().astype("float64") - b[k].numpy()).max()) for k in a)
    check.numbers["max_abs_weight_diff"] = worst
    check.status, check.detail = ("pass" if worst == 0.0 else "fail"), f"best/ weights differ by at most {worst:.3g}"
    return check


def predictor_checks(export: Path, data: Path, device: str) -> list[Check]:
    """Each GPU predictor against the CPU predictor: probability parity, top-label agreement, speed."""
    import numpy as np

    from paddle_ft.errors import UserError
    from paddle_ft.inference.predictor import Predictor, stack_probabilities

    if not (export / EXPORT_INFO).is_file():
        return [Check("predictor", "skip", "no export to load (the export check failed)")]
    texts = [line.split("\t")[0] for line in (data / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:257]]
    reference = stack_probabilities(Predictor(export, PredictOptions(cpu_threads=2)).predict(texts))
    variants = {"cpu fp32": {}} if device == "cpu" else {
        "gpu fp32": {"device": "gpu"}, "gpu fp16": {"device": "gpu", "precision": "fp16"},
        "gpu tensorrt fp16": {"device": "gpu", "precision": "fp16", "use_tensorrt": True}}
    checks = []
    for name, options in variants.items():
        try:
            predictor = Predictor(export, PredictOptions(**options))
        except UserError as exc:
            checks.append(Check(f"predictor {name}", "skip", str(exc)))
            continue
        probs = stack_probabilities(predictor.predict(texts))
        started = time.perf_counter()
        for _ in range(5):
            predictor.predict(texts, batch_size=32)
        speed = 5 * len(texts) / (time.perf_counter() - started)
        diff = float(np.abs(probs - reference).max())
        agree = float((probs.argmax(1) == reference.argmax(1)).mean())
        bound = PREDICTOR_BOUNDS[name.rsplit(" ", 1)[-1] if device == "gpu" else "cpu"]
        ok = diff <= bound and agree >= 0.99
        checks.append(Check(f"predictor {name}", "pass" if ok else "fail",
                            f"max prob diff {diff:.2g} (bound {bound:g}), top label agrees on {agree:.1%}, "
                            f"{speed:.0f} texts/s at batch 32", {"max_prob_diff": diff, "agreement": agree,
                                                                  "texts_per_s": round(speed, 1)}))
    return checks


def launch(work: Path, log_dir: Path, device: str, command: list[str]) -> list[str]:
    """`python -m paddle.distributed.launch` running `python -m paddle_ft COMMAND` on 2 GPUs, or on a CPU as 2
    gloo processes. The launcher takes a script, not a module: a two-line one is written into `work` (the package's
    own __main__.py, run as a script, would put the package's folder first on sys.path, where its modules named
    like others, io, text, log, would shadow them)."""
    script = work / "paddle_ft_main.py"
    script.write_text("import sys\n\nfrom paddle_ft.cli import main\n\nsys.exit(main())\n", encoding="utf-8")
    devices = ["--gpus", "0,1"] if device == "gpu" else ["--nproc_per_node", "2"]
    return [sys.executable, "-m", "paddle.distributed.launch", *devices, "--log_dir", str(log_dir), str(script),
            *command]


@dataclass(frozen=True)
class TwoProcessRow:
    """A data-parallel run against one process with the same global batch (32)."""
    name: str
    overrides: tuple[str, ...] = ()  # both runs
    per_rank: tuple[str, ...] = ("train.batch_size=16",)
    bound: float = 1e-3  # the largest weight difference allowed


TWO_PROCESS_ROWS = (TwoProcessRow("plain"),
                    # data parallel + O2 + accumulation: the master gradients summed over micro-batches, then
                    # all-reduced; never run anywhere before issue 67 (both 2-GPU rows accumulated 1, the CPU ran fp32)
                    TwoProcessRow("fp16 O2, accumulation 2", tuple(PRECISIONS["fp16-O2"]),
                                  ("train.batch_size=8", "train.accumulate_steps=2"), 1e-2))


def two_process_check(work: Path, base: list[str], device: str = "gpu", row: TwoProcessRow = TWO_PROCESS_ROWS[0]
                      ) -> Check:
    """2 ranks against 1 process with the same global batch, dropout off so that the ranks' different dropout
    streams do not count: the same weights up to all-reduce rounding (and, for an AMP row, float16's), finite losses,
    and the replicas identical (the trainer's own check, in rank 0's log)."""
    import numpy as np

    title = ("2-process --gpus 0,1" if device == "gpu" else "2-process gloo on the CPU") + \
        ("" if row.name == "plain" else f", {row.name}")
    unsupported = precision_unsupported("fp16-O2", device) if row.overrides else None
    if unsupported:
        return Check(title, "skip", unsupported)
    same = base + [*row.overrides, "model.dropout=0", "train.max_steps=50"]
    folder = work / ("two-process" if row.name == "plain" else "two-process-" + "".join(
        c if c.isalnum() else "-" for c in row.name))
    single, double = folder / "one-process", folder / "two-process"
    check = command_check("1-process reference", train_command(single, same), device, env=DETERMINISTIC)
    if check.status != "pass":
        return Check(title, "fail", f"the one-process reference failed: {check.detail}")
    command = launch(work, folder / "log", device, train_command(double, same + list(row.per_rank)))
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **DETERMINISTIC}, timeout=1800)
    if done.returncode != 0:
        return Check(title, "fail", f"exit {done.returncode}; see {folder / 'log'}")
    from paddle_ft.artifacts.bundle import read_weights

    a, b = read_weights(RunFiles(single).best_dir), read_weights(RunFiles(double).best_dir)
    worst = max(float(np.abs(a[k].numpy() - b[k].numpy()).max()) for k in a)
    finite = loss_trend(double)["losses"] and all(np.isfinite(loss_trend(double)["losses"]))
    identical = "weights identical on all 2 ranks" in (folder / "log" / "workerlog.0").read_text(errors="replace")
    ok = worst < row.bound and finite and identical
    return Check(title, "pass" if ok else "fail",
                 f"best/ weights within {worst:.3g} of one process (bound {row.bound:g}), losses finite: {finite}, "
                 f"replicas identical: {identical}", {"max_abs_weight_diff": worst})


def killed_rank_check(folder: Path, base: list[str], device: str) -> Check:
    """One of 2 ranks killed by SIGKILL mid-run (an OOM kill, a lost node): the launcher ends the job, and
    `train.resume=auto` on 2 processes goes on from the newest periodic checkpoint to the best/ weights of the same
    job never interrupted, bit for bit. The kill comes once half the steps are checkpointed (a GPU runs more steps:
    its job must still be running then)."""
    import numpy as np

    from paddle_ft.artifacts.bundle import read_weights
    from paddle_ft.engine.checkpoint import is_complete

    title = "kill -9 of one rank, then train.resume=auto" + (" (2 gloo processes)" if device == "cpu" else "")
    steps = 200 if device == "gpu" else 40
    same = base + [f"train.max_steps={steps}", f"train.checkpoints.every={steps // 4}", "train.checkpoints.keep=10",
                   "train.batch_size=16"]
    whole, broken, env = folder / "whole", folder / "broken", {**os.environ, **DETERMINISTIC}
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(launch(folder, folder / "log-whole", device, train_command(whole, same)),
                          capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        return Check(title, "fail", f"the uninterrupted job exited {done.returncode}; see {folder / 'log-whole'}")
    launcher = subprocess.Popen(launch(folder, folder / "log-broken", device, train_command(broken, same)), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 1800
    while launcher.poll() is None and time.time() < deadline and not is_complete(
            broken / "checkpoints" / f"step-{steps // 2}"):
        time.sleep(0.05)
    workers = children(launcher.pid)
    if launcher.poll() is not None or len(workers) != 2:
        for pid in [*workers, launcher.pid]:  # only what this check started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launcher.wait()
        return Check(title, "fail", f"no mid-run moment to kill a rank at: the launcher had {len(workers)} workers, "
                                    f"exit {launcher.poll()}; see {folder / 'log-broken'}")
    os.kill(workers[-1], signal.SIGKILL)  # one rank, by the PID of the launcher started here
    if launcher.wait(timeout=600) == 0:
        return Check(title, "fail", "the launcher exited 0 with a rank killed")
    resumed = subprocess.run(launch(folder, folder / "log-resumed", device,
                                    train_command(broken, same + ["train.resume=auto"])),
                             capture_output=True, text=True, env=env, timeout=1800)
    if resumed.returncode != 0:
        return Check(title, "fail", f"the resumed job exited {resumed.returncode}; see {folder / 'log-resumed'}")
    said = next((line.split("resumed from ")[1] for line in (folder / "log-resumed" / "workerlog.0").read_text(
        errors="replace").splitlines() if "resumed from " in line), "nowhere")
    a, b = read_weights(RunFiles(whole).best_dir), read_weights(RunFiles(broken).best_dir)
    worst = max(float(np.abs(a[k].numpy() - b[k].numpy()).max()) for k in a)
    return Check(title, "pass" if worst == 0.0 else "fail",
                 f"the job ended {launcher.returncode} with a rank killed; resumed from {said}; best/ weights differ "
                 f"from the uninterrupted job's by at most {worst:.3g}", {"max_abs_weight_diff": worst})


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, read from /proc (a slim image has no pgrep)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # after the command's name: state, ppid
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


def interconnect() -> str:
    """How GPU 0 and 1 talk, from `nvidia-smi topo -m`: "NV<n>" (NVLink), else the PCIe path (PIX, PXB, PHB, NODE,
    SYS), or "unknown"."""
    try:
        table = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return link_between_gpu0_and_gpu1(table)


def link_between_gpu0_and_gpu1(table: str) -> str:
    """The GPU0 row's cell in the GPU1 column of `nvidia-smi topo -m`'s matrix (its header line starts indented)."""
    lines = table.splitlines()
    header = next((line.split() for line in lines if line[:1].isspace() and "GPU1" in line.split()), None)
    row = next((line.split() for line in lines if line.startswith("GPU0")), None)
    if header is None or row is None or len(row) <= header.index("GPU1") + 1:
        return "unknown"
    return row[header.index("GPU1") + 1]


def scaling_floor(link: str) -> float:
    """2 GPUs against one: 1.8x over NVLink; over PCIe (an H100 PCIe pair without a bridge) the gradients' all-reduce
    of bert-base (~440 MB a step in fp32) costs more, and 1.6x is the floor."""
    return TWO_GPU_SCALING_FLOOR if link.startswith("NV") else PCIE_SCALING_FLOOR


def two_gpu_scaling_check(folder: Path, arguments: list[str], rows: dict, link: str | None = None) -> Check:
    """`--gpus 0,1` at bert-base's shape, the fastest precision, the same batch per GPU: samples/s of the job
    against the one-GPU row of the AMP table, held to the floor of the GPUs' interconnect (said)."""
    name = max(rows, key=lambda row: rows[row]["samples_per_s"], default=None)
    link = link or interconnect()
    floor = scaling_floor(link)
    title = f"bert-base 2 GPUs >= {floor}x one ({link})"
    if name is None:
        return Check(title, "fail", "no one-GPU row to compare with")
    out = folder / "two-gpus"
    command = launch(folder, folder / "log", "gpu", train_command(out, [*arguments, *AMP_ROWS[name],
                                                                        f"train.max_steps={BERT_STEPS}",
                                                                        f"train.batch_size={BERT_BATCH}"]))
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return Check(title, "fail", f"exit {done.returncode}; see {folder / 'log'}")
    scaling = speed_and_memory(out)["samples_per_s"] / rows[name]["samples_per_s"]
    return scaling_verdict(title, name, scaling, link)


def scaling_verdict(title: str, precision: str, scaling: float, link: str) -> Check:
    floor = scaling_floor(link)
    return Check(title, "pass" if scaling >= floor else "fail",
                 f"{precision}: {scaling:.2f}x the samples/s of one GPU over {link} (floor {floor}x)",
                 {"scaling": scaling, "precision": precision, "interconnect": link})


def report(checks: list[Check], path: Path) -> None:
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.status.upper():4}  {c.name:{width}}  {c.detail}")
    path.write_text(json.dumps([asdict(c) for c in checks], indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
