"""`make gpu-check`: prove the GPU path on a GPU machine in one command, with nothing but the image and
the installed package (it writes its own synthetic corpus).

On one GPU: training with fp32, O1 float16, O2 float16 and O1 bfloat16 (where the GPU has them), an exact
resume of the O2 run after SIGTERM, export with parity on CPU and GPU, `Predictor` on GPU fp32 / fp16 /
TensorRT fp16 against the CPU predictor (parity and speed), and a 2-process `--gpus 0,1` job against one
process when two GPUs are visible. Prints a pass/fail/skip table and writes `gpu_check.json`; every skip
says why. `--device cpu` runs the same plumbing on a CPU (fp32 only): try it before taking it to a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

CHARS = {"正面": "好棒赞喜爱快美优满意", "负面": "差坏烂慢糟退失望贵破"}
NEUTRAL = "的了是我这个书手机买东西服务质量"
PRECISIONS = {"fp32": [], "fp16-O1": ["train.amp.enabled=true", "train.amp.dtype=float16", "train.amp.level=O1"],
              "fp16-O2": ["train.amp.enabled=true", "train.amp.dtype=float16", "train.amp.level=O2"],
              "bf16-O1": ["train.amp.enabled=true", "train.amp.dtype=bfloat16", "train.amp.level=O1"]}
# cuBLAS/cuDNN pick among algorithms per run unless told not to: the exact-resume check needs one
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
    args = parser.parse_args(argv)
    import shutil

    import paddle

    gpus = paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0
    if args.device == "gpu" and gpus == 0:  # a GPU check that checked nothing is no pass
        build = "a CUDA build" if paddle.is_compiled_with_cuda() else "the CPU build, without CUDA"
        print(f"error: no CUDA GPU found (paddle {paddle.__version__}, {build}): gpu-check checked nothing; run it "
              "where nvidia-smi lists a GPU with paddle's GPU build (the official Paddle GPU image, or "
              "pip install '.[gpu]'), or pass --device cpu for the plumbing only", file=sys.stderr)
        return 1
    work = Path(args.output)
    if work.exists() and any(work.iterdir()) and not (work / "data" / "config.yaml").is_file():
        # only an earlier gpu-check folder (its corpus is written first) is ever deleted
        print(f"error: --output {work} holds files gpu-check did not write; give a new folder", file=sys.stderr)
        return 2
    shutil.rmtree(work, ignore_errors=True)
    config = write_corpus(work / "data", args.steps)
    checks = run_checks(work, config, args.device, gpus)
    report(checks, work / "gpu_check.json")
    return 1 if any(c.status == "fail" for c in checks) else 0


def run_checks(work: Path, config: Path, device: str, gpus: int) -> list[Check]:
    import paddle

    checks = [environment(device, gpus)]
    base = ["--config", str(config)]
    runs = {}
    for name, overrides in PRECISIONS.items():
        if device == "cpu" and name != "fp32":
            checks.append(Check(f"train {name}", "skip", "AMP is a GPU matter (Paddle turns it off on CPU)"))
            continue
        supported = {"fp16": paddle.amp.is_float16_supported, "bf16": paddle.amp.is_bfloat16_supported}
        kind = name.split("-")[0]
        if kind in supported and not supported[kind]("gpu:0"):
            checks.append(Check(f"train {name}", "skip", f"{kind} is not supported on this GPU (paddle_ft refuses it)"))
            continue
        out = work / f"train-{name}"
        checks.append(train_check(name, out, base + overrides, device))
        runs[name] = out
    resumed = "fp16-O2" if "fp16-O2" in runs else "fp32"
    if resumed in runs:
        checks.append(resume_check(resumed, runs[resumed], work / f"resume-{resumed}", base + PRECISIONS[resumed],
                                   device))
    export = work / "export"
    checks.append(command_check("export", ["export", "--model", str(runs["fp32"] / "best"), "--output", str(export)],
                                device, lambda: json.loads((export / "export.json").read_text())))
    checks += predictor_checks(export, config.parent, device)
    checks.append(amp_table_check(work / "bench", config.parent) if device == "gpu" else
                  Check("bench AMP table", "skip", "the AMP rows need a GPU (on CPU: make bench, fp32 row only)"))
    if gpus >= 2:
        checks.append(two_process_check(work, base))
    else:
        checks.append(Check("2-process --gpus 0,1", "skip", f"{gpus} GPU(s) visible; needs 2"))
    return checks


def write_corpus(folder: Path, steps: int) -> Path:
    """A learnable two-class corpus of mood characters among neutral ones, its character vocabulary, and
    the recipe that trains a 4-layer, 256-wide BERT on it (returned)."""
    import yaml

    from paddle_ft.data.demo import SPECIAL_TOKENS

    folder.mkdir(parents=True)
    rng = random.Random(0)
    for split, n in (("train", 4000), ("dev", 400)):
        rows = []
        for i in range(n):
            label = list(CHARS)[i % 2]
            text = "".join(rng.choice(CHARS[label] if rng.random() < 0.3 else NEUTRAL)
                           for _ in range(rng.randint(4, 60)))
            rows.append(f"{text}\t{label}")
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    chars = sorted(set("".join(CHARS.values()) + NEUTRAL))
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *chars]) + "\n", encoding="utf-8")
    recipe = {"data": {"train": str(folder / "train.tsv"), "dev": str(folder / "dev.tsv"), "max_length": 64,
                       "cache_dir": None},
              "model": {"scratch": {"vocab_file": str(folder / "vocab.txt"), "hidden_size": 256, "num_layers": 4,
                                    "num_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 128}},
              "train": {"max_steps": steps, "batch_size": 32, "optimizer": {"learning_rate": 5e-4},
                        "runtime": {"log_every": 20}, "evaluation": {"every": steps // 3},
                        "checkpoints": {"every": 50}}}
    (folder / "config.yaml").write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return folder / "config.yaml"


def environment(device: str, gpus: int) -> Check:
    import paddle

    numbers = {"paddle": paddle.__version__, "cuda_build": paddle.is_compiled_with_cuda(), "gpus": gpus}
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
                          lambda: {"dev_accuracy": json.loads((out / "results.json").read_text())["dev"]["accuracy"],
                                   "samples_per_s": last_speed(out)}, env=DETERMINISTIC)
    if check.status == "pass" and check.numbers["dev_accuracy"] < 0.9:
        check.status, check.detail = "fail", f"dev accuracy {check.numbers['dev_accuracy']:.3f} < 0.9 (did it learn?)"
    return check


def train_command(out: Path, arguments: list[str]) -> list[str]:
    """`train --config C` plus `-o` for output_dir and every KEY=VALUE in `arguments`."""
    config, overrides = arguments[:2], arguments[2:]
    return ["train", *config, *[x for o in [f"output_dir={out}", *overrides] for x in ("-o", o)]]


def last_speed(out: Path) -> float | None:
    speeds = [e["samples_per_s"] for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if e["event"] == "train"]
    return round(speeds[-1], 1) if speeds else None


def resume_check(name: str, whole: Path, broken: Path, overrides: list[str], device: str) -> Check:
    """SIGTERM a run of the same recipe mid-way, resume it, and compare every weight with the whole run."""
    import numpy as np
    import paddle

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
    a = paddle.load(str(whole / "best" / "model_state.pdparams"))
    b = paddle.load(str(broken / "best" / "model_state.pdparams"))
    worst = max(float(np.abs(a[k].numpy().astype("float64") - b[k].numpy()).max()) for k in a)
    check.numbers["max_abs_weight_diff"] = worst
    check.status, check.detail = ("pass" if worst == 0.0 else "fail"), f"best/ weights differ by at most {worst:.3g}"
    return check


def predictor_checks(export: Path, data: Path, device: str) -> list[Check]:
    """Each GPU predictor against the CPU predictor: probability parity, top-label agreement, speed."""
    import numpy as np

    from paddle_ft.errors import UserError
    from paddle_ft.infer import Predictor, stack_probabilities

    if not (export / "export.json").is_file():
        return [Check("predictor", "skip", "no export to load (the export check failed)")]
    texts = [line.split("\t")[0] for line in (data / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:257]]
    reference = stack_probabilities(Predictor(export, cpu_threads=2).predict(texts))
    variants = {"cpu fp32": {}} if device == "cpu" else {
        "gpu fp32": {"device": "gpu"}, "gpu fp16": {"device": "gpu", "precision": "fp16"},
        "gpu tensorrt fp16": {"device": "gpu", "precision": "fp16", "use_tensorrt": True}}
    checks = []
    for name, options in variants.items():
        try:
            predictor = Predictor(export, **options)
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
        bound = 1e-4 if name.endswith("fp32") else 2e-2
        ok = diff <= bound and agree >= 0.99
        checks.append(Check(f"predictor {name}", "pass" if ok else "fail",
                            f"max prob diff {diff:.2g} (bound {bound:g}), top label agrees on {agree:.1%}, "
                            f"{speed:.0f} texts/s at batch 32", {"max_prob_diff": diff, "agreement": agree,
                                                                  "texts_per_s": round(speed, 1)}))
    return checks


def amp_table_check(folder: Path, data: Path) -> Check:
    """The bench's AMP table (fp32 / fp16 / bf16: speed, epoch time, peak GPU memory, largest batch, accuracy
    after one epoch) on this corpus, with the bench's own model shape and batch."""
    from paddle_ft import runtime
    from paddle_ft.bench.run import Jobs, amp_table
    from paddle_ft.bench.shape import train_steps

    (folder / "logs").mkdir(parents=True)
    jobs = Jobs(folder, runtime.usable_cores())
    common = {"demo": str(data), "workdir": str(folder / "work"), "threads": runtime.usable_cores(),
              "steps": train_steps(2)}
    fp32 = jobs.paddle("paddle_ft", common)
    examples = len((data / "train.tsv").read_text(encoding="utf-8").splitlines()) - 1
    table = amp_table(jobs, common, fp32, examples)
    (folder / "amp.json").write_text(json.dumps(table, indent=2), encoding="utf-8")
    missing = [row["precision"] for row in table["rows"]
               if row["samples_per_s"] is None or row["largest_batch"] is None or row.get("largest_batch_error")]
    summary = "; ".join(f"{r['precision']}: {r['samples_per_s'] or 0:.0f} samples/s, batch <= {r['largest_batch']}, "
                        f"accuracy {r['final_accuracy']}" for r in table["rows"])
    return Check("bench AMP table", "fail" if missing else "pass",
                 f"rows without numbers: {', '.join(missing)}; see {folder / 'logs'}" if missing else summary,
                 {"rows": table["rows"]})


def two_process_check(work: Path, base: list[str]) -> Check:
    """2 ranks x batch 16 against 1 process x batch 32 (the same global batch), dropout off so that the
    ranks' different dropout streams do not count: the same weights, up to all-reduce rounding."""
    import numpy as np
    import paddle

    same = base + ["model.dropout=0", "train.max_steps=50"]
    single, double = work / "one-process", work / "two-process"
    check = command_check("1-process reference", train_command(single, same), "gpu", env=DETERMINISTIC)
    if check.status != "pass":
        return Check("2-process --gpus 0,1", "fail", f"the one-process reference failed: {check.detail}")
    script = Path(__file__).resolve().parent / "__main__.py"  # python -m paddle_ft, as a script for the launcher
    command = [sys.executable, "-m", "paddle.distributed.launch", "--gpus", "0,1", "--log_dir", str(work / "log"),
               str(script), *train_command(double, same + ["train.batch_size=16"])]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **DETERMINISTIC}, timeout=1800)
    if done.returncode != 0:
        return Check("2-process --gpus 0,1", "fail", f"exit {done.returncode}; see {work / 'log'}")
    a = paddle.load(str(single / "best" / "model_state.pdparams"))
    b = paddle.load(str(double / "best" / "model_state.pdparams"))
    worst = max(float(np.abs(a[k].numpy() - b[k].numpy()).max()) for k in a)
    return Check("2-process --gpus 0,1", "pass" if worst < 1e-3 else "fail",
                 f"best/ weights within {worst:.3g} of one process", {"max_abs_weight_diff": worst})


def report(checks: list[Check], path: Path) -> None:
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.status.upper():4}  {c.name:{width}}  {c.detail}")
    path.write_text(json.dumps([asdict(c) for c in checks], indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
