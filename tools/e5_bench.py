"""paddle_ft against the Hugging Face stack on the same pretrained weights (multilingual-e5-small, trimmed), side by
side in one run:

    python tools/e5_bench.py [--config configs/demo-e5-long.yaml] [--output out/e5-bench] [--phases speed,accuracy,inference]

- speed: `--rounds` turns of `--steps` training steps each, paddle_ft's `train` then the HF `Trainer`
  (tools/e5_bench_peer.py, under the peer environment of `make bench-peers`); samples/s after the first 8 steps,
  peak memory, each engine's median turn with the range. Both read the config's recipe and train on the same token
  ids, in one `--precision` (float32, or bfloat16: paddle_ft's bf16 matmuls against the Trainer's `bf16=True`), and on
  an AMD CPU the HF side gets MKL's code path as paddle_ft takes it (the same library by LD_PRELOAD).
- accuracy: the config's whole recipe with each engine (epochs, learning rate, warmup, weight decay, clipping, batch,
  dropout, mean pooling, length-grouped batches, the best epoch by dev accuracy) once per seed (`--seeds`: the
  config's seed and the next ones), taking turns; test accuracy as the mean and range over the seeds, wall time. A
  run finished by an earlier bench into the same folder (same config, precision and machine) is kept: the six runs
  of three seeds take hours and can be finished over several.
- inference: paddle_ft's best/ (of the accuracy run, or --model) exported; Paddle Inference and ONNX Runtime at
  batch 1 and 32, and its int8 copy against fp32 on the test split (the bench's `inference` job).

Writes OUTPUT/e5_bench.json and OUTPUT/e5_bench.md after each phase (each child's log in OUTPUT/logs/; a later run
into the same folder keeps the phases it does not repeat) and prints the table with the three bars: test accuracy within 0.5 points of HF's or above, training >= 1.3x HF's samples/s, int8 within 0.5
points of fp32, accuracy and speed judged on the means and medians. The machine (CPU model and its speed flags) is
named in the table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from bench.run import children_path, same_mkl_environment  # noqa: E402
from bench.seeds import over_seeds  # noqa: E402
from paddle_ft.arguments import ArgumentParser, positive_int  # noqa: E402
from paddle_ft.errors import UserError  # noqa: E402

PEER_SCRIPT = ROOT / "tools" / "e5_bench_peer.py"
PEER_MARK = "E5_BENCH_RESULT "
SKIP_STEPS = 8  # start-up steps left out of both engines' rates (kernels built, caches warm, HF's longest batch)
PHASES = ("speed", "accuracy", "inference")
RESULTS = "e5_bench.json"
BARS = {"accuracy_points_behind_hf": 0.5, "speed_ratio": 1.3, "int8_points_lost": 0.5}
PRECISIONS = {"float32": ["train.amp.enabled=false"],  # as the Trainer trains by default (train.amp auto: bf16 here)
              "bfloat16": ["train.amp.enabled=true", "train.amp.dtype=bfloat16"]}


def main() -> int:
    parser = ArgumentParser(prog="tools/e5_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/demo-e5-long.yaml", help="the recipe both engines run")
    parser.add_argument("--output", default="out/e5-bench")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"a comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--steps", type=positive_int, default=56, help="training steps of each speed run")
    parser.add_argument("--rounds", type=positive_int, default=3, help="speed runs per engine, taking turns")
    parser.add_argument("--seeds", type=positive_int, default=3,
                        help="accuracy runs per engine: the config's seed and the next")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32", help="both engines' (default float32)")
    parser.add_argument("--model", help="a trained best/ to export in the inference phase (default: the accuracy run's)")
    parser.add_argument("--peers-python", default=os.environ.get("PADDLE_FT_PEERS_PYTHON", ".venv-peers/bin/python"))
    args = parser.parse_args()
    try:
        return bench(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def bench(args: argparse.Namespace) -> int:
    from paddle_ft import runtime
    from paddle_ft.config import load_config
    from paddle_ft.artifacts.ownership import owned_folder

    phases = [p for p in args.phases.split(",") if p]
    if unknown := set(phases) - set(PHASES):
        raise UserError(f"--phases {args.phases}: {', '.join(sorted(unknown))} unknown; choose from {','.join(PHASES)}")
    if {"speed", "accuracy"} & set(phases) and not Path(args.peers_python).is_file():
        raise UserError(f"no peer python at {args.peers_python}: run make bench-peers (torch + transformers)")
    if "inference" in phases and "accuracy" not in phases and not args.model:
        raise UserError("the inference phase exports the accuracy run's best/: add accuracy to --phases or give --model")
    config = load_config(args.config)
    threads = runtime.usable_cores()
    machine = {"cpu": runtime.cpu_model(), "kind": runtime.cpu_kind(), "flags": runtime.cpu_speed_flags(),
               "cores": os.cpu_count(), "threads": threads}
    peer_environment, why_not = same_mkl_environment()
    with owned_folder(args.output, "bench", "--output") as output:
        results = earlier_results(output / RESULTS, args.config, machine, args.precision)
        results["peer_mkl"] = "paddle_ft's MKL code path, by LD_PRELOAD" if peer_environment else why_not
        runs = Runs(output, threads, peer_environment)
        features = write_features(config, output / "features")
        for phase in phases:  # each phase's results are kept as soon as it ends: a later failure loses none
            if phase == "speed":
                results["speed"] = speed(runs, args, config, features)
            elif phase == "accuracy":
                results["accuracy"] = accuracy(runs, args, config, features, results,
                                               lambda: write_results(output, results))
            else:
                model = args.model or str(output / "runs" / f"paddle_ft-accuracy-seed-{config.seed}" / "best")
                results["inference"] = runs.inference(model, Path(config.data.test).parent)
            table = write_results(output, results)
    print(table)
    return 0


def earlier_results(path: Path, config: str, machine: dict, precision: str) -> dict:
    """The results of an earlier run into the same folder, of the same config and precision on the same machine,
    whose phases and seeds this run does not repeat (a bench of hours can be finished over several runs); else a
    fresh record."""
    fresh = {"config": config, "machine": machine, "precision": precision}
    if not path.is_file():
        return fresh
    earlier = json.loads(path.read_text(encoding="utf-8"))
    same = {key: earlier.get(key) for key in fresh} == fresh
    return {**earlier, **fresh} if same else fresh


def write_results(output: Path, results: dict) -> str:
    from paddle_ft.io import write_text_atomically

    results["bars"] = bars({key: value for key, value in results.items() if key != "accuracy_runs"})
    write_text_atomically(output / RESULTS, json.dumps(results, indent=2, ensure_ascii=False))
    table = markdown(results)
    write_text_atomically(output / "e5_bench.md", table)
    return table


def write_features(config, folder: Path) -> dict[str, Path]:
    """Each split's token ids by the backbone's own tokenizer (paddle_ft's), for the HF peer: both engines see the
    same ids (the tokenizers agree; tests/model/test_e5_small.py)."""
    from paddle_ft.data.labels import resolve_labels
    from paddle_ft.data.readers import Columns, format_of, read_examples
    from paddle_ft.tokenization import load_tokenizer

    tokenizer = load_tokenizer(Path(config.model.backbone))
    columns = Columns(config.data.text_column, None, config.data.label_column)
    folder.mkdir(parents=True, exist_ok=True)
    paths, labels = {}, None
    for split in ("train", "dev", "test"):
        path = getattr(config.data, split)
        examples = read_examples(path, config.data.format or format_of(path), columns)[0]
        labels = labels or resolve_labels(config.data.labels, [e.label for e in examples])
        encoded = tokenizer([e.text for e in examples], max_length=config.data.max_length, truncation=True)
        paths[split] = folder / f"{split}.jsonl"
        with paths[split].open("w", encoding="utf-8") as out:
            for ids, types, example in zip(encoded["input_ids"], encoded["token_type_ids"], examples):
                out.write(json.dumps({"input_ids": ids, "token_type_ids": types, "label": labels.id(example.label)})
                          + "\n")
    paths["num_labels"] = len(labels.names)
    return paths


def peer_settings(config, features: dict, threads: int, **extra) -> dict:
    """The config's recipe, as the HF peer reads it."""
    o = config.train.optimizer
    return {"backbone": str(config.model.backbone), "train": str(features["train"]), "num_labels": features["num_labels"],
            "epochs": config.train.epochs, "learning_rate": o.learning_rate, "warmup": o.warmup,
            "weight_decay": o.weight_decay, "max_grad_norm": o.max_grad_norm, "batch_size": config.train.batch_size,
            "dropout": config.model.dropout, "seed": config.seed, "threads": threads, **extra}


def speed(runs: "Runs", args, config, features: dict) -> dict:
    """Training samples/s of each engine, `args.rounds` runs each, taking turns (a slow spell of a shared machine
    falls on both); each engine's median run by real tokens/s counts (of an even number, the slower middle one),
    with every run's rates."""
    turns: dict[str, list[dict]] = {"paddle_ft": [], "hf_trainer": []}
    for turn in range(args.rounds):
        turns["paddle_ft"].append(runs.paddle_ft(f"speed-{turn}", args.config, [
            f"train.max_steps={args.steps}", "data.dev=null", "data.test=null", *PRECISIONS[args.precision]],
            log_every=SKIP_STEPS))
        turns["hf_trainer"].append(runs.peer(f"speed-{turn}", args.peers_python, peer_settings(
            config, features, runs.threads, max_steps=args.steps, bf16=args.precision == "bfloat16")))
    return {name: median_turn(done) for name, done in turns.items()}


def median_turn(done: list[dict]) -> dict:
    ranked = sorted(done, key=lambda run: run["real_tokens_per_s"])
    return {**ranked[(len(ranked) - 1) // 2],
            "all_runs_samples_per_s": [round(run["samples_per_s"], 2) for run in done],
            "all_runs_real_tokens_per_s": [round(run["real_tokens_per_s"]) for run in done]}


def accuracy(runs: "Runs", args, config, features: dict, results: dict, save) -> dict:
    """The config's whole recipe with each engine once per seed, the engines taking turns; each finished run is kept
    in `results` and saved (`save`) at once, and one an earlier bench into the same folder finished is not run
    again. Each engine's test accuracy as the mean and range over the seeds."""
    seeds = [config.seed + i for i in range(args.seeds)]
    done = results.setdefault("accuracy_runs", {"paddle_ft": {}, "hf_trainer": {}})
    for seed in seeds:
        if str(seed) not in done["paddle_ft"]:
            done["paddle_ft"][str(seed)] = runs.paddle_ft(f"accuracy-seed-{seed}", args.config, [
                f"seed={seed}", *PRECISIONS[args.precision]], log_every=SKIP_STEPS)
            save()
        if str(seed) not in done["hf_trainer"]:
            done["hf_trainer"][str(seed)] = runs.peer(f"accuracy-seed-{seed}", args.peers_python, peer_settings(
                config, features, runs.threads, seed=seed, bf16=args.precision == "bfloat16",
                dev=str(features["dev"]), test=str(features["test"])))
            save()
    return {engine: engine_over_seeds({seed: done[engine][str(seed)] for seed in seeds}) for engine in done}


def engine_over_seeds(runs: dict[int, dict]) -> dict:
    """One engine's runs of the recipe, one a seed: accuracy as mean and range, training samples/s and wall time as
    medians, the largest peak memory."""
    return over_seeds(runs, medians=("samples_per_s", "wall_seconds"), largest=("peak_rss_mb",))


class Runs:
    """Child processes, each with its log in OUTPUT/logs/ and its peak resident memory its own. `peer_environment`:
    the HF side's (MKL's code path as paddle_ft takes it), None for the parent's."""

    def __init__(self, output: Path, threads: int, peer_environment: dict | None = None):
        self.output, self.threads, self.peer_environment = output, threads, peer_environment
        (output / "logs").mkdir(parents=True, exist_ok=True)

    def paddle_ft(self, name: str, config: str, overrides: list[str], log_every: int | None = None) -> dict:
        """A `train` run of `config`; with `log_every`, its training rates after SKIP_STEPS (a multiple of it)."""
        from paddle_ft.artifacts.run import RunFiles

        folder = self.output / "runs" / f"paddle_ft-{name}"
        shutil.rmtree(folder, ignore_errors=True)  # this bench's own run of an earlier bench
        command = [sys.executable, "-m", "paddle_ft", "train", "-c", config, "-o", f"output_dir={folder}",
                   "-o", f"train.runtime.cpu_threads={self.threads}", *(f"-o{o}" for o in overrides)]
        if log_every:
            command += ["-o", f"train.runtime.log_every={log_every}"]
        run = self._run(f"paddle_ft-{name}", command)
        files = RunFiles(folder)
        if log_every:
            run.update(training_rates(files.read_events("train"), log_every))
        if files.finished:
            results = files.read_results()
            run.update({f"{split}_accuracy": getattr(results, split)["accuracy"]
                        for split in ("dev", "test") if getattr(results, split)})
        return run

    def peer(self, name: str, python: str, settings: dict) -> dict:
        settings_file = self.output / "logs" / f"hf_trainer-{name}.json"
        settings_file.write_text(json.dumps(settings), encoding="utf-8")
        return self._run(f"hf_trainer-{name}", [python, str(PEER_SCRIPT), str(settings_file)], mark=PEER_MARK,
                         env=self.peer_environment)

    def inference(self, model_dir: str, data: Path) -> dict:
        from bench.shape import RESULT_MARK

        job = {"model_dir": model_dir, "demo": str(data), "workdir": str(self.output / "inference"),
               "threads": self.threads, "batch_sizes": [1, 32], "rounds": 5, "samples_per_round": 96,
               "latency_calls": 200}
        return self._run("inference", [sys.executable, "-m", "bench.jobs", "inference", json.dumps(job)],
                         mark=RESULT_MARK)

    def _run(self, name: str, command: list[str], mark: str | None = None, env: dict | None = None) -> dict:
        log = self.output / "logs" / f"{name}.log"
        print(f"e5-bench: {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        with log.open("w", encoding="utf-8") as err:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                                     env={**(env or os.environ), "PYTHONPATH": children_path()})
            out = child.stdout.read()
            _, status, usage = os.wait4(child.pid, 0)
            err.write(out)
        seconds = time.perf_counter() - started
        if status != 0:
            raise UserError(f"{name} failed after {seconds:.0f} s (exit status {status}); see {log}")
        print(f"e5-bench: {name} done in {seconds:.0f} s", file=sys.stderr, flush=True)
        run = {"wall_seconds": round(seconds, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024)}
        if mark:
            lines = [line for line in out.splitlines() if line.startswith(mark)]
            if not lines:
                raise UserError(f"{name} printed no result line; see {log}")
            run.update(json.loads(lines[-1][len(mark):]))
        return run


def training_rates(events: list, log_every: int) -> dict:
    """Samples/s and real tokens/s over the training windows after SKIP_STEPS, as totals over time. A window is
    `log_every` steps of full batches; the one an epoch's end cuts short (evaluation and saving restart the clock)
    is left out."""
    seconds = samples = tokens = 0.0
    for previous, event in zip(events, events[1:]):
        if event.step - previous.step != log_every or event.values["epoch"] != previous.values["epoch"] \
                or previous.step < SKIP_STEPS:
            continue
        window_seconds = log_every / event.values["samples_per_s"]  # in units of one batch: cancels below
        seconds += window_seconds
        samples += log_every
        tokens += event.values["tokens_per_s"] * window_seconds
    return {"samples_per_s": samples / seconds, "real_tokens_per_s": tokens / seconds} if seconds else {}


def bars(results: dict) -> dict:
    """The issue's three bars, each with its measured value and whether it is met (None: phase not run)."""
    out = {}
    if "accuracy" in results:  # the means over the seeds
        behind = 100 * (results["accuracy"]["hf_trainer"]["test_accuracy"]
                        - results["accuracy"]["paddle_ft"]["test_accuracy"])
        out["accuracy_points_behind_hf"] = {"value": round(behind, 2),
                                            "met": behind <= BARS["accuracy_points_behind_hf"]}
    # Over the whole recipe both engines train on the same rows, so their samples/s compare; the short turns see
    # different mixes of lengths (HF's sampler starts with the longest batch), so there real tokens/s compare.
    if "accuracy" in results:
        rows = results["accuracy"]
        ratio, basis = (rows["paddle_ft"]["samples_per_s"] / rows["hf_trainer"]["samples_per_s"],
                        "whole recipe, median samples/s over the seeds")
    elif "speed" in results:
        rows = results["speed"]
        ratio, basis = rows["paddle_ft"]["real_tokens_per_s"] / rows["hf_trainer"]["real_tokens_per_s"], \
            "speed turns, median real tokens/s"
    if "accuracy" in results or "speed" in results:
        out["speed_ratio"] = {"value": round(ratio, 2), "met": ratio >= BARS["speed_ratio"], "basis": basis}
    if "inference" in results and results["inference"].get("int8_check"):
        check = results["inference"]["int8_check"]
        lost = 100 * (check["accuracy_fp32"] - check["accuracy_int8"])
        out["int8_points_lost"] = {"value": round(lost, 2), "met": lost <= BARS["int8_points_lost"]}
    return out


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"# paddle_ft against the HF Trainer on multilingual-e5-small ({results['config']}, "
             f"{results.get('precision', 'float32')})", "",
             f"Machine: {m['cpu']} ({m.get('kind', 'CPU kind not recorded')}), {m['cores']} cores, {m['threads']} "
             f"threads; CPU flags: {' '.join(m['flags'])}. The HF side's MKL: {results.get('peer_mkl', 'not recorded')}",
             ""]
    if "speed" in results:
        lines += ["## Training speed (the median turn; every turn in brackets)", "",
                  "| engine | samples/s | real tokens/s | peak memory MB |", "|---|---|---|---|"]
        for name, run in results["speed"].items():
            lines.append(f"| {name} | {run['samples_per_s']:.1f} ({', '.join(map(str, run['all_runs_samples_per_s']))})"
                         f" | {run['real_tokens_per_s']:,.0f} "
                         f"({', '.join(f'{r:,}' for r in run.get('all_runs_real_tokens_per_s', []))}) | {_mb(run)} |")
        lines.append("")
    if "accuracy" in results:
        seeds = ", ".join(map(str, next(iter(results["accuracy"].values()))["seeds"]))
        lines += [f"## The whole recipe, seeds {seeds} (mean and range; training samples/s, the median, leave "
                  "evaluation and saving out)", "",
                  "| engine | dev accuracy | test accuracy | test accuracy per seed | training samples/s | "
                  "wall minutes | peak memory MB |", "|---|---|---|---|---|---|---|"]
        for name, run in results["accuracy"].items():
            per_seed = ", ".join(f"{r['test_accuracy']:.4f}" for r in run["runs"].values())
            lines.append(f"| {name} | {run['dev_accuracy']:.4f} ({_range(run['dev_accuracy_range'])}) | "
                         f"{run['test_accuracy']:.4f} ({_range(run['test_accuracy_range'])}) | {per_seed} | "
                         f"{run['samples_per_s']:.1f} | {run['wall_seconds'] / 60:.1f} | {_mb(run)} |")
        lines.append("")
    if "inference" in results:
        engines = results["inference"]["engines"]
        lines += ["## The exported classifier", "", "| engine | batch 1 p50 ms | batch 1 samples/s | batch 32 samples/s "
                  "| largest logit difference from dygraph |", "|---|---|---|---|---|"]
        for name, run in engines.items():
            lines.append(f"| {name} | {run['batch_1_p50_ms']:.1f} | {run['batch_1']['samples_per_s']:.1f} | "
                         f"{run['batch_32']['samples_per_s']:.1f} | {run['max_abs_diff']:.1e} |")
        check = results["inference"].get("int8_check")
        if check:
            lines += ["", f"int8 ({check['method']}): test accuracy {check['accuracy_int8']:.4f} against fp32's "
                          f"{check['accuracy_fp32']:.4f}, the same label on {check['agreement']:.1%} of "
                          f"{check['texts']} texts"]
        lines.append("")
    lines += ["## Bars", ""]
    for name, bar in results["bars"].items():
        basis = f", {bar['basis']}" if "basis" in bar else ""
        lines.append(f"- {name}: {bar['value']} (bar {BARS[name]}{basis}): {'met' if bar['met'] else 'NOT met'}")
    return "\n".join(lines) + "\n"


def _range(bounds: list[float]) -> str:
    return f"{bounds[0]:.4f}-{bounds[1]:.4f}"


def _mb(run: dict) -> str:
    return f"{run['peak_rss_mb']:,}" if run.get("peak_rss_mb") is not None else "not measured"


if __name__ == "__main__":
    sys.exit(main())
