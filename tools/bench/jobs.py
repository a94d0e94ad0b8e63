"""The benchmark's Paddle-side measurements, one per child process:

    python -m bench.jobs JOB ARGS_JSON

Jobs: `paddle_ft` (our engine, through the real `train` command, float32), `paddle_ft_bf16` (the same with
bfloat16 matmuls), `paddlenlp_trainer` (PaddleNLP's
`Trainer` with its defaults, in an environment without paddle_ft's settings), `inference` and
`tokenizer`. Each prints one result line (shape.emit).
"""
from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.shape import (BATCH_SIZE, LEARNING_RATE, MAX_LENGTH, WARMUP_WINDOWS, WINDOW_STEPS, StepRecorder, emit,
                         model_shape, summarise_windows)


def _scratch_overrides(demo: Path, output_dir: Path, steps: int, threads: int) -> list[str]:
    shape = model_shape()
    return [f"output_dir={output_dir}", f"data.train={demo / 'train.tsv'}", "data.dev=null", "data.test=null",
            "data.labels=null", f"data.max_length={shape['max_length']}",
            f"model.scratch.vocab_file={demo / 'vocab.txt'}", f"model.scratch.hidden_size={shape['hidden_size']}",
            f"model.scratch.num_layers={shape['num_layers']}", f"model.scratch.num_heads={shape['num_heads']}",
            f"model.scratch.intermediate_size={shape['intermediate_size']}",
            f"model.scratch.max_position_embeddings={shape['max_length']}", f"train.batch_size={BATCH_SIZE}",
            f"train.optimizer.learning_rate={LEARNING_RATE}", f"train.max_steps={steps}",
            f"train.runtime.cpu_threads={threads}", "train.amp.enabled=false"]  # float32 unless a row asks (bf16)


BF16 = {"train.amp.enabled": True, "train.amp.dtype": "bfloat16"}


def paddle_ft(args: dict) -> dict:
    """Our engine exactly as `tools/train.py` runs it; throughput from its own metrics.jsonl windows. With
    args["texts"] ({"warmup": TSV, "measured": TSV}, the training table's protocol) a short run on the warm-up texts
    first, then one timed epoch over the measured texts, all of whose windows count; otherwise args["steps"] steps
    over the demo's train split, the first window warm-up."""
    from paddle_ft import runtime
    from paddle_ft.artifacts.run import RunFiles

    runtime.configure()
    output_dir = Path(args["workdir"]) / f"paddle_ft-{args.get('name', 'fp32')}"
    texts = args.get("texts")
    if texts:
        _train(args, output_dir.with_name(output_dir.name + "-warmup"),
               [f"data.train={texts['warmup']}", f"train.max_steps={WINDOW_STEPS}"])
        _train(args, output_dir, [f"data.train={texts['measured']}", "train.max_steps=null", "train.epochs=1"])
    elif args.get("dev"):  # a full run scored on dev (the AMP table's accuracy column)
        _train(args, output_dir, [f"data.dev={Path(args['demo']) / 'dev.tsv'}", "train.max_steps=null",
                                  "train.epochs=1"])
    else:
        _train(args, output_dir, [])
    import paddle

    extra = {}
    if paddle.device.get_device().startswith("gpu"):
        extra["gpu_peak_memory_mb"] = paddle.device.cuda.max_memory_allocated() / 2**20
    run = RunFiles(output_dir)
    if args.get("dev"):
        extra["dev_accuracy"] = run.read_results().dev["accuracy"]
    windows = []
    for event in run.read_events("train"):  # every window but a last short one has WINDOW_STEPS full batches
        seconds = WINDOW_STEPS * BATCH_SIZE / event.values["samples_per_s"]
        windows.append({"seconds": seconds, "samples": WINDOW_STEPS * BATCH_SIZE,
                        "real_tokens": event.values["tokens_per_s"] * seconds,
                        "padded_tokens": event.values["padded_tokens_per_s"] * seconds})
    warmup = 0 if texts else WARMUP_WINDOWS
    return {**summarise_windows(windows, warmup), **extra} if len(windows) > warmup else extra


def paddle_ft_bf16(args: dict) -> dict:
    """The paddle_ft job with the linear layers' matmuls in bfloat16 (a CPU with bfloat16 arithmetic)."""
    return paddle_ft({**args, "name": "bf16", "overrides": {**args.get("overrides", {}), **BF16}})


def _train(args: dict, output_dir: Path, overrides: list[str]) -> None:
    """The train command on the bench's shape and settings in a fresh `output_dir`, `overrides` last (they win)."""
    from paddle_ft.workflows.training import train

    shutil.rmtree(output_dir, ignore_errors=True)  # the bench's own scratch run: a second bench starts afresh
    settings = _scratch_overrides(Path(args["demo"]), output_dir, args["steps"], args["threads"])
    settings += [f"train.runtime.log_every={WINDOW_STEPS}", f"data.group_by_length={args.get('group_by_length', True)}"]
    settings += [f"{key}={value}" for key, value in args.get("overrides", {}).items()]
    train(None, settings + overrides)


def paddlenlp_trainer(args: dict) -> dict:
    """`paddlenlp.trainer.Trainer` as its examples use it: BertForSequenceClassification,
    DataCollatorWithPadding, TrainingArguments defaults (no length grouping)."""
    import tempfile

    import paddle
    from paddlenlp.data import DataCollatorWithPadding
    from paddlenlp.trainer import Trainer, TrainerCallback, TrainingArguments
    from paddlenlp.transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    rows = _read_features(args["features"])
    dataset = [{"input_ids": r["input_ids"], "token_type_ids": r["token_type_ids"], "labels": r["label"]}
               for r in rows]
    tokenizer = BertTokenizer(str(Path(args["demo"]) / "vocab.txt"))
    paddle.seed(0)
    shape = model_shape()
    model = BertForSequenceClassification(BertConfig(
        vocab_size=len(tokenizer.vocab), hidden_size=shape["hidden_size"], num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"], intermediate_size=shape["intermediate_size"],
        max_position_embeddings=shape["max_length"], num_labels=2))
    pad = DataCollatorWithPadding(tokenizer)
    recorder = StepRecorder()

    def counting_collator(features):
        batch = pad(features)
        ids = batch["input_ids"].numpy()
        recorder.batch(len(features), int((ids != tokenizer.pad_token_id).sum()), int(ids.size))
        return batch

    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=BATCH_SIZE,
                                          max_steps=args["steps"], learning_rate=LEARNING_RATE, report_to=[],
                                          save_strategy="no", logging_steps=10**9, disable_tqdm=True, seed=0)
        Trainer(model=model, args=training_args, train_dataset=dataset, data_collator=counting_collator,
                callbacks=[recorder.callback(TrainerCallback)]).train()
    return recorder.summary()


def _read_features(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def tokenizer(args: dict) -> dict:
    """Texts/s of PaddleNLP's Python BertTokenizer and of the tokenizer the pipeline uses."""
    from paddle_ft import runtime
    from paddle_ft.data.readers import Columns, read_examples
    from paddle_ft.tokenization import fast_tokenizer_for

    runtime.configure()
    from paddlenlp.transformers import BertTokenizer

    texts = [e.text for e in read_examples(Path(args["demo"]) / "test.tsv", "tsv", Columns("text", None, "label"))[0]]
    slow = BertTokenizer(str(Path(args["demo"]) / "vocab.txt"))
    fast = fast_tokenizer_for(slow)
    results = {}
    for name, tok in (("paddlenlp_python", slow), ("paddle_ft", fast)):
        if tok is None:
            continue
        rounds = []
        for _ in range(args.get("rounds", 3)):
            started = time.perf_counter()
            tok(texts, max_length=MAX_LENGTH, truncation=True)
            rounds.append(len(texts) / (time.perf_counter() - started))
        results[name] = {"texts_per_s": statistics.median(rounds), "class": type(tok).__name__}
    return results


def profile(args: dict) -> dict:
    """paddle_ft's training steps under Paddle's profiler (the same run as the `paddle_ft` job, shorter): the share
    of the steps' wall time each kind of operator takes (limits.profile_groups), warm-up steps left out."""
    import paddle.profiler as profiler

    from bench.limits import profile_groups

    trace_dir = Path(args["workdir"]) / "profile-trace"
    shutil.rmtree(trace_dir, ignore_errors=True)
    session = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU],
                                on_trace_ready=profiler.export_chrome_tracing(str(trace_dir)))
    session.start()
    paddle_ft({**args, "name": "profile"})
    session.stop()
    return profile_groups(next(trace_dir.glob("*.json")), skip_steps=args["skip_steps"])


def limits(args: dict) -> dict:
    """The machine's matmul GFLOP/s, in this run (limits.gemm_rates)."""
    from paddle_ft import runtime
    from bench.limits import gemm_rates

    runtime.configure()
    runtime.apply_cpu_settings(args["threads"])
    return {"gemm": gemm_rates(args["threads"], args["seconds_per_shape"])}


JOBS = {"paddle_ft": paddle_ft, "paddle_ft_bf16": paddle_ft_bf16, "paddlenlp_trainer": paddlenlp_trainer,
        "tokenizer": tokenizer, "profile": profile, "limits": limits}


def main(argv: list[str]) -> int:
    name, args = argv[0], json.loads(argv[1])
    if name == "inference":
        from bench.inference import inference as job
    elif name == "models":
        from bench.inference import models as job
    else:
        job = JOBS[name]
    emit(job(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
