"""`python tools/bench.py [--output DIR]`: run every measurement in its own child process, then write
DIR/bench.json, DIR/bench.md and DIR/bench.png and print the table."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from paddle_ft import runtime
from bench import report, search
from bench.search import ProbeFailed
from bench.shape import (BATCH_SIZE, MAX_LENGTH, RESULT_MARK, SHAPE_VARIABLE, WINDOW_STEPS, measured_texts,
                         model_shape, train_steps)
from paddle_ft.errors import UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.artifacts.ownership import owned_folder

HF_SCRIPT = Path(__file__).with_name("hf_trainer.py")
DEFAULT_PEERS_PYTHON = ".venv-peers/bin/python"
NAMED_SHAPES = {"bert-base": "12,768,12,3072", "e5-small": "12,384,12,1536"}
PADDLENLP_WINDOWS = 3  # its rate varies little between windows (random batches); more would cost minutes
TRAIN_ROUNDS = 3  # paddle_ft and the HF Trainers: runs each, taking turns; a row is its median run (train_rows)
SERVE_ROUNDS = 3  # the load test, every server afresh each time; a row is its median round (serving.load_test)
# the HF Trainer's rows: (name, hf_trainer.py's flags, with MKL's code path as paddle_ft takes it, bfloat16)
HF_ROWS = (("hf_trainer", [], False, False),
           ("hf_trainer_group_by_length", ["--group-by-length"], False, False),
           ("hf_trainer_group_by_length_same_mkl", ["--group-by-length"], True, False),
           ("hf_trainer_group_by_length_bf16", ["--group-by-length", "--bf16"], True, True))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from paddle_ft.arguments import positive_int

    parser.add_argument("--output", default="out/bench", help="folder for bench.json, bench.md, bench.png, logs/")
    parser.add_argument("--data", default="data/demo", help="the demo corpus (tools/prepare_demo_data.py)")
    parser.add_argument("--threads", type=positive_int, default=None, help="CPU threads for every engine (default: all usable cores)")
    parser.add_argument("--windows", type=positive_int, default=6,
                        help="training texts timed, in windows of 8 batches: every engine trains one epoch over the "
                             "same WINDOWS x 8 x 32 texts, after 8 warm-up steps on others (PaddleNLP's Trainer, the "
                             "slowest by far, times at most 3 windows of them)")
    parser.add_argument("--peers-python", default=os.environ.get("PADDLE_FT_PEERS_PYTHON", DEFAULT_PEERS_PYTHON),
                        help="python of the peer environment with torch + transformers (make bench-peers)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (fewer samples); numbers are rough")
    parser.add_argument("--serve", action="store_true",
                        help="also load-test the HTTP service on the bench's export (batching adaptive, 5 ms, off)")
    parser.add_argument("--teacher", help="a trained model folder to compare with --student (its distilled student)")
    parser.add_argument("--student", help="a trained model folder: speed and test accuracy beside --teacher's")
    parser.add_argument("--model-shape", default=None, metavar="LAYERS,HIDDEN,HEADS,INTERMEDIATE",
                        help="another encoder shape than the reference 4,256,4,1024, or e5-small (12,384,12,1536), "
                             "bert-base (12,768,12,3072); ratios are only comparable at the same shape")


def main(args: argparse.Namespace) -> int:
    demo = Path(args.data)
    if not (demo / "train.tsv").is_file() or not (demo / "vocab.txt").is_file():
        raise UserError(f"{demo} has no train.tsv/vocab.txt: build the demo corpus with "
                        f"python tools/prepare_demo_data.py --output {demo}")
    if args.model_shape:
        os.environ[SHAPE_VARIABLE] = NAMED_SHAPES.get(args.model_shape, args.model_shape)  # the children read it
        try:
            model_shape()
        except ValueError:
            raise UserError(f"--model-shape {args.model_shape}: give four integers, e.g. 4,256,4,1024") from None
    with owned_folder(args.output, "bench", "--output") as output:
        return _bench(args, demo, output)


def _bench(args: argparse.Namespace, demo: Path, output: Path) -> int:
    workdir = output / "work"
    (output / "logs").mkdir(parents=True, exist_ok=True)
    threads = args.threads or runtime.usable_cores()
    windows = 1 if args.quick else args.windows
    steps = train_steps(windows)
    texts = write_training_texts(demo, workdir, measured_texts(windows))
    jobs = Jobs(output, threads)
    started = time.perf_counter()

    common = {"demo": str(demo), "workdir": str(workdir), "threads": threads, "steps": steps}
    results: dict = {"tokenizer": jobs.paddle("tokenizer", common)}
    results["train"], slow_steps = train_rows(jobs, common, windows, texts, demo, Path(args.peers_python),
                                              1 if args.quick else TRAIN_ROUNDS)
    results["amp"] = amp_table(jobs, common, results["train"]["paddle_ft"], texts.train_split,
                               results["train"].get("paddle_ft_bf16"))
    results["limits"] = jobs.paddle("limits", {**common, "seconds_per_shape": 0.1 if args.quick else 0.5})
    results["profile"] = jobs.paddle("profile", {**common, "steps": train_steps(1 if args.quick else 2),
                                                 "skip_steps": WINDOW_STEPS})
    infer = jobs.paddle("inference", {
        **common, "model_dir": str(workdir / "paddle_ft-fp32" / "best"), "batch_sizes": [1, 8, 32],
        "rounds": 2 if args.quick else 5, "samples_per_round": 32 if args.quick else 96,
        "latency_calls": 30 if args.quick else 200})
    results["infer"] = infer.pop("engines", {}) if "error" not in infer else {"error": infer["error"]}
    results["infer_precision_skipped"] = infer.get("precision_skipped", [])
    results["int8_check"] = infer.get("int8_check")
    results["infer_mean_tokens"], results["auto_route"] = infer.get("mean_tokens"), infer.get("auto_route")
    if args.teacher and args.student:
        results["models"] = jobs.paddle("models", {**common, "models": {"teacher": args.teacher,
                                                                       "student": args.student},
                                                   "rounds": 3, "samples_per_round": 96,
                                                   "latency_calls": 30 if args.quick else 200})
    if args.serve:
        results["serve"] = serve_rows(workdir / "export", demo, threads, args.quick)
    results["machine"] = machine(threads, infer, results["train"].get("hf_trainer", {}))
    results["settings"] = {"shape": model_shape(), "batch_size": BATCH_SIZE, "precision": "fp32",
                           "measured_texts": measured_texts(windows), "warmup_steps": WINDOW_STEPS,
                           "paddlenlp_trainer_steps": slow_steps,
                           "quick": args.quick, "seconds": round(time.perf_counter() - started, 1)}
    results["ratios"] = report.ratios(results)
    write_text_atomically(output / "bench.json", json.dumps(results, indent=2, ensure_ascii=False))
    table = report.markdown(results)
    write_text_atomically(output / "bench.md", table)
    report.chart(results, output / "bench.png")
    print(table)
    print(f"wrote {output / 'bench.json'}, {output / 'bench.md'}, {output / 'bench.png'} "
          f"in {results['settings']['seconds']:.0f} s")
    return 0


def serve_rows(export: Path, demo: Path, threads: int, quick: bool) -> list[dict]:
    """The load test's table on the bench's export (the inference job wrote it)."""
    from bench.serving import load_test
    from paddle_ft.data.readers import Columns, read_examples

    texts = [e.text for e in read_examples(demo / "test.tsv", "tsv", Columns("text", None, "label"))[0]]
    print("bench: serve (load test) ...", file=sys.stderr, flush=True)
    if quick:  # a smoke run: two levels, a few requests each
        return load_test(export, texts, [1, 8], 40, 10, threads)
    return load_test(export, texts, [1, 8, 32], 400, 60, threads, rounds=SERVE_ROUNDS)


def train_rows(jobs: "Jobs", common: dict, windows: int, texts: "TrainingTexts", demo: Path,
               peers_python: Path, train_rounds: int = TRAIN_ROUNDS) -> tuple[dict, int]:
    """The training table: our engine (float32, and bfloat16 on a CPU with bfloat16 arithmetic), PaddleNLP's
    Trainer, and the HF Trainer (when the peer environment exists) as a user runs it, with length grouping, with
    length grouping and MKL's code path as paddle_ft takes it (an AMD CPU: the same library, by LD_PRELOAD), and in
    bfloat16 (torch's CPU autocast). Returns (rows, the steps PaddleNLP's Trainer ran).

    paddle_ft and the HF Trainers train on the same texts (`texts`): a few steps on the warm-up ones, then one timed
    epoch over the measured ones, each in its own batch order; so their samples/s and real tokens/s stand in the
    same ratio. (Timing a window of each engine's epoch instead measured other texts per engine: paddle_ft's window
    averaged 50 real tokens a text, HF's 59, the split 61.) They run `train_rounds` times, taking turns, and each
    row is its median run by real tokens/s, every run in the row's "runs" (the best of them leaned the ratios toward
    whichever engine had the luckiest run). PaddleNLP's Trainer, 11x slower, runs once, over a window of its random
    batches of the measured texts."""
    bf16 = runtime.cpu_supports_bf16()
    same_mkl, why_not_same = same_mkl_environment()
    given = runtime.environment_as_given()
    job = {**common, "texts": {"warmup": str(texts.warmup_tsv), "measured": str(texts.measured_tsv)}}
    rounds: dict[str, list[dict]] = {}
    skipped: dict[str, str] = {}
    for _ in range(train_rounds):
        rounds.setdefault("paddle_ft", []).append(jobs.paddle("paddle_ft", job))
        if bf16:
            rounds.setdefault("paddle_ft_bf16", []).append(jobs.paddle("paddle_ft_bf16", job))
        for name, flags, like_ours, in_bf16 in HF_ROWS:
            if not peers_python.is_file():
                skipped[name] = f"no peer environment at {peers_python}: run make bench-peers"
            elif in_bf16 and not bf16:
                skipped[name] = f"this {runtime.cpu_kind()} CPU has no bfloat16 arithmetic"
            elif like_ours and same_mkl is None and not in_bf16:
                skipped[name] = why_not_same
            else:
                rounds.setdefault(name, []).append(jobs.run(
                    name, [str(peers_python), str(HF_SCRIPT), str(texts.measured_features),
                           str(texts.warmup_features), str(demo / "vocab.txt"), str(common["threads"]), *flags],
                    same_mkl if like_ours and same_mkl is not None else given))
    rows = {name: _median_run(runs) for name, runs in rounds.items()}
    rows.update({name: {"samples_per_s": None, "skipped": why} for name, why in skipped.items()})
    if not bf16:
        rows["paddle_ft_bf16"] = {"samples_per_s": None, "skipped": f"this {runtime.cpu_kind()} CPU has no bfloat16 "
                                  "arithmetic"}
    # PaddleNLP's Trainer as a user runs it: none of the settings paddle_ft applies at start-up
    slow_steps = train_steps(min(windows, PADDLENLP_WINDOWS))
    rows["paddlenlp_trainer"] = jobs.paddle("paddlenlp_trainer", {**common, "features": str(texts.measured_features),
                                                                  "steps": slow_steps},
                                            env=given)
    return rows, slow_steps


def same_mkl_environment() -> tuple[dict | None, str | None]:
    """(the environment that gives another process MKL's code path as paddle_ft takes it, None), or (None, why
    there is none). On an AMD CPU paddle_ft loads a library that answers MKL's vendor check (kernels/mkl_vendor.py);
    the same library by LD_PRELOAD does it for torch's MKL. On another CPU MKL takes its fastest path for both."""
    from paddle_ft.kernels.mkl_vendor import built_library

    if runtime.cpu_vendor() != "AuthenticAMD":
        return None, "not an AMD CPU: MKL takes its fastest path in both engines"
    library, why_not = built_library()
    if library is None:
        return None, why_not
    given = runtime.environment_as_given()
    preload = " ".join(filter(None, [str(library), given.get("LD_PRELOAD")]))
    return {**given, "LD_PRELOAD": preload}, None


def _median_run(runs: list[dict]) -> dict:
    """The median run by real tokens/s (of an even number, the slower middle one; a failed run only where all
    failed), with every run's rates."""
    done = sorted((run for run in runs if run.get("real_tokens_per_s")), key=lambda run: run["real_tokens_per_s"])
    middle = done[(len(done) - 1) // 2] if done else runs[-1]
    return {**middle, "runs": [{key: run.get(key) for key in ("samples_per_s", "real_tokens_per_s")}
                               for run in runs]}


class Jobs:
    """Runs a measurement in a child process, its output in logs/NAME.log; a failed child is reported,
    not fatal, so one broken engine still leaves a table of the others."""

    def __init__(self, output: Path, threads: int):
        self.output, self.threads = output, threads

    def paddle(self, name: str, args: dict, env: dict | None = None) -> dict:
        command = [sys.executable, "-m", "bench.jobs", name, json.dumps(args)]
        return self.run(name, command, env if env is not None else dict(os.environ))

    def run(self, name: str, command: list[str], env: dict) -> dict:
        # threads fixed for every engine; paddle's import would otherwise have set 1 for the children
        env = {**env, "OMP_NUM_THREADS": str(self.threads), "PYTHONPATH": children_path()}
        log = self.output / "logs" / f"{name}.log"
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        with log.open("w", encoding="utf-8") as out:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=out, text=True, env=env, check=False)
            out.write(done.stdout)
        marked = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
        seconds = time.perf_counter() - started
        if done.returncode != 0 or not marked:
            print(f"bench: {name} failed after {seconds:.0f} s (exit {done.returncode}); see {log}", file=sys.stderr)
            return {"samples_per_s": None, "error": f"exit {done.returncode}; see {log}",
                    "out_of_memory": search.is_out_of_memory(log.read_text(encoding="utf-8", errors="replace"))}
        print(f"bench: {name} done in {seconds:.0f} s", file=sys.stderr, flush=True)
        return {**json.loads(marked[-1][len(RESULT_MARK):]), "job_seconds": round(seconds, 1)}


def children_path() -> str:
    """PYTHONPATH of a child: this checkout's paddle_ft, installed or not, and tools/ for `bench` itself."""
    tools = Path(__file__).resolve().parents[1]
    return os.pathsep.join([str(tools.parent), str(tools)])


@dataclass(frozen=True)
class TrainingTexts:
    """The training table's texts, drawn from the demo's train split: as TSV for paddle_ft's train command, and as
    token ids (the same tokenizer and vocabulary) for the Trainer peers, so every engine trains on exactly our ids."""
    warmup_tsv: Path
    measured_tsv: Path
    warmup_features: Path
    measured_features: Path
    train_split: int
    """texts in the whole train split (the AMP table's epoch)"""


def write_training_texts(demo: Path, workdir: Path, measured: int) -> TrainingTexts:
    """A seeded sample of the train split, written under workdir: WINDOW_STEPS batches to warm up on, then
    `measured` other texts to time."""
    import numpy as np

    from paddle_ft.data.labels import resolve_labels
    from paddle_ft.data.readers import Columns, read_examples, write_examples

    columns = Columns("text", None, "label")
    examples = read_examples(demo / "train.tsv", "tsv", columns)[0]
    labels = resolve_labels(None, [e.label for e in examples])  # the split's, so both samples number them alike
    warmup = WINDOW_STEPS * BATCH_SIZE
    if len(examples) < warmup + measured:
        raise UserError(f"{demo / 'train.tsv'} has {len(examples)} texts; the bench trains on {warmup} to warm up and "
                        f"times {measured} others: give fewer --windows or a larger corpus")
    order = np.random.default_rng(0).permutation(len(examples))
    workdir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, chosen in (("warmup", order[:warmup]), ("measured", order[warmup:warmup + measured])):
        sample = [examples[i] for i in chosen]
        paths[f"{name}_tsv"] = workdir / f"train_{name}.tsv"
        write_examples(paths[f"{name}_tsv"], "tsv", columns, sample)
        paths[f"{name}_features"] = workdir / f"train_{name}_features.jsonl"
        _write_features(sample, labels, demo / "vocab.txt", paths[f"{name}_features"])
    return TrainingTexts(**paths, train_split=len(examples))


def _write_features(examples: list, labels, vocab: Path, path: Path) -> None:
    """Token ids of the examples' texts, and their labels' ids, one JSON line a text."""
    from paddlenlp.transformers import BertTokenizer

    encoded = BertTokenizer(str(vocab))([e.text for e in examples], max_length=MAX_LENGTH, truncation=True)
    lines = [json.dumps({"input_ids": ids, "token_type_ids": types, "label": labels.id(example.label)})
             for ids, types, example in zip(encoded["input_ids"], encoded["token_type_ids"], examples)]
    write_text_atomically(path, "".join(line + "\n" for line in lines))


AMP_ROWS = (("fp32", {}), ("fp16 (O1)", {"train.amp.enabled": True, "train.amp.dtype": "float16"}),
            ("bf16 (O1)", {"train.amp.enabled": True, "train.amp.dtype": "bfloat16"}))


def amp_table(jobs: "Jobs", common: dict, fp32: dict, train_examples: int, bf16: dict | None = None) -> dict:
    """AMP vs fp32: speed, time per epoch, peak memory, largest batch, accuracy after one epoch. On a CPU Paddle turns
    auto_cast and GradScaler off, so its fp16/bf16 rows would be the fp32 run: the fp32 row, and paddle_ft's own bf16
    matmuls (the training table's row) where the CPU has bfloat16 arithmetic."""
    import paddle

    def row(precision: str, measured: dict, largest=None, accuracy=None) -> dict:
        speed = measured.get("samples_per_s")
        return {"precision": precision, "samples_per_s": speed,
                "epoch_minutes": train_examples / speed / 60 if speed else None,
                "peak_memory_mb": measured.get("gpu_peak_memory_mb", measured.get("peak_rss_mb")),
                "largest_batch": largest, "final_accuracy": accuracy}

    if not (paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0):
        rows = [row("fp32", fp32)] + ([row("bf16 matmuls (paddle_ft)", bf16)] if bf16 and bf16.get("samples_per_s")
                                      else [])
        return {"device": "cpu", "rows": rows, "note": (
            "CPU: Paddle's fp16/bf16 AMP does not apply (it disables auto_cast and GradScaler on CPUPlace); the bf16 "
            "row, where the CPU has bfloat16 arithmetic, is paddle_ft's bfloat16 matmuls (train.amp); largest batch, "
            "GPU memory and AMP accuracy need a GPU run")}
    rows = []
    for precision, overrides in AMP_ROWS:  # a GPU: every cell is measured (not run on the CPU-only machine here)
        measured = fp32 if not overrides else jobs.paddle(f"amp-{precision.split()[0]}", {
            **common, "name": precision.split()[0], "overrides": overrides})
        accuracy = jobs.paddle(f"amp-{precision.split()[0]}-epoch", {
            **common, "name": precision.split()[0] + "-epoch", "overrides": overrides, "dev": True})
        largest, failure = largest_batch(jobs, common, precision.split()[0], overrides)
        rows.append({**row(precision, measured, largest, accuracy.get("dev_accuracy")),
                     **({"largest_batch_error": failure} if failure else {})})
    return {"device": "gpu", "rows": rows, "note": "GPU: accuracy is dev accuracy after one epoch"}


def largest_batch(jobs: "Jobs", common: dict, precision: str, overrides: dict,
                  limit: int = 4096) -> tuple[int | None, str | None]:
    """The largest batch a 3-step run trains at (bench.search, from 32): (it or None, why a probe failed otherwise)."""
    def fits(size: int) -> bool:
        name = f"largest-batch-{precision}-{size}"  # one run folder per precision and size
        result = jobs.paddle(name, {**common, "steps": 3, "name": name,
                                    "overrides": {**overrides, "train.batch_size": size}})
        if "error" in result and not result.get("out_of_memory"):
            raise ProbeFailed(result["error"])
        return "error" not in result

    found = search.largest_batch(fits, 32, cap=limit)
    return found.fit or None, found.failure


def machine(threads: int, infer: dict, hf: dict) -> dict:
    import paddle
    import paddlenlp

    return {"cpu": runtime.cpu_model(), "vendor": runtime.cpu_vendor(), "cores": os.cpu_count(),
            "usable_cores": runtime.usable_cores(), "threads": threads, "python": platform.python_version(),
            "paddle_version": paddle.__version__, "paddlenlp_version": paddlenlp.__version__,
            "onnxruntime_version": infer.get("onnxruntime_version"), "peer_versions": hf.get("versions"),
            "bf16_cpu": runtime.cpu_supports_bf16(), "cpu_flags": runtime.cpu_speed_flags(),
            "cpu_kind": runtime.cpu_kind()}
