"""Inference throughput and latency of one trained model under four engines, on real demo texts:
dygraph, the exported graph under Paddle Inference with oneDNN off and on, and ONNX Runtime on the
same graph converted by paddle2onnx at export (the `Predictor`'s backends). Every engine gets the same
padded batches, and its logits are compared with dygraph's."""
from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import numpy as np

ENGINES = ("dygraph", "paddle_inference", "paddle_inference_onednn", "onnxruntime")


def inference(args: dict) -> dict:
    from paddle_ft import runtime

    runtime.configure()
    import paddle

    from paddle_ft.bundle import load_bundle
    from paddle_ft.data.features import pad_ids
    from paddle_ft.data.readers import Columns, read_examples
    from paddle_ft.export import export_model
    from paddle_ft.infer import Predictor

    threads = args["threads"]
    runtime.apply_cpu_settings(threads)
    workdir = Path(args["workdir"])
    export_dir = workdir / "export"
    shutil.rmtree(export_dir, ignore_errors=True)  # a previous run's export belongs to another model
    export_model(Path(args["model_dir"]), export_dir)
    predictors = {"paddle_inference": Predictor(export_dir, cpu_threads=threads, enable_onednn=False),
                  "paddle_inference_onednn": Predictor(export_dir, cpu_threads=threads, backend="paddle"),
                  "onnxruntime": Predictor(export_dir, cpu_threads=threads, backend="onnxruntime")}
    tokenizer = predictors["paddle_inference"].tokenizer
    texts = [e.text for e in read_examples(Path(args["demo"]) / "test.tsv", "tsv", Columns("text", None, "label"))[0]]
    encoded = tokenizer(texts, max_length=predictors["paddle_inference"].max_length, truncation=True)

    def batches(size: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Consecutive texts in file order (mixed lengths), each batch padded to its longest; a short file
        is cycled through."""
        repeat = -(-size * count // len(texts))
        ids, types = encoded["input_ids"] * repeat, encoded["token_type_ids"] * repeat
        return [pad_ids(ids[i:i + size], types[i:i + size], tokenizer.pad_token_id)
                for i in range(0, size * count, size)]

    model = load_bundle(args["model_dir"], with_tokenizer=False).model

    @paddle.no_grad()
    def dygraph(input_ids, token_type_ids):
        return model(paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids)).numpy()

    engines = {"dygraph": dygraph, **{name: p.run for name, p in predictors.items()}}
    precision, skipped = _precision_predictors(export_dir, threads)
    engines.update({name: p.run for name, p in precision.items()})
    results = {name: _throughput(run, dygraph, batches, args) for name, run in engines.items()}
    single = batches(1, args["latency_calls"])
    for name, run in engines.items():
        results[name].update(_latency(run, single))
    return {"engines": results, "precision_skipped": skipped, "threads": threads,
            "onnxruntime_version": _onnxruntime_version()}


def _throughput(run, reference_run, batches, args: dict) -> dict:
    """Median samples/s over rounds, per batch size; the largest logit difference from dygraph and the share
    of equal top labels."""
    results = {"max_abs_diff": 0.0}
    for size in args["batch_sizes"]:
        work = batches(size, max(4, args["samples_per_round"] // size))
        reference = [reference_run(*batch) for batch in work]
        for batch in work[:2]:  # warm-up: first-call allocation and oneDNN primitive creation
            run(*batch)
        rounds = []
        for _ in range(args["rounds"]):
            started = time.perf_counter()
            outputs = [run(*batch) for batch in work]
            rounds.append(size * len(work) / (time.perf_counter() - started))
        diff = max(float(np.abs(out - ref).max()) for out, ref in zip(outputs, reference))
        agree = [float((out.argmax(-1) == ref.argmax(-1)).mean()) for out, ref in zip(outputs, reference)]
        results[f"batch_{size}"] = {"samples_per_s": statistics.median(rounds),
                                    "label_agreement": float(np.mean(agree))}
        results["max_abs_diff"] = max(diff, results["max_abs_diff"])
    return results


def _latency(run, single: list) -> dict:
    """p50 and p99 milliseconds of one text per call."""
    latencies = []
    for batch in single:
        started = time.perf_counter()
        run(*batch)
        latencies.append((time.perf_counter() - started) * 1000)
    return {"batch_1_p50_ms": float(np.percentile(latencies, 50)),
            "batch_1_p99_ms": float(np.percentile(latencies, 99))}


def _precision_predictors(export_dir: Path, threads: int) -> tuple[dict, list[str]]:
    """The reduced-precision rows this machine can run, and why the others are missing."""
    import paddle

    from paddle_ft.errors import UserError
    from paddle_ft.infer import Predictor, check_tensorrt, program_file
    from paddle_ft.runtime import cpu_supports_bf16

    predictors, skipped = {}, []
    if cpu_supports_bf16():
        predictors["paddle_inference_onednn_bf16"] = Predictor(export_dir, cpu_threads=threads, precision="bf16")
    else:
        skipped.append("bf16 (oneDNN): this CPU has neither AVX512-BF16 nor AMX-BF16")
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        predictors["paddle_inference_gpu"] = Predictor(export_dir, device="gpu")
        predictors["paddle_inference_gpu_fp16"] = Predictor(export_dir, device="gpu", precision="fp16")
        try:
            check_tensorrt(program_file(export_dir), "gpu")
            if not paddle.inference.get_trt_compile_version()[0]:
                raise UserError("this paddle build has no TensorRT")
            predictors["paddle_inference_gpu_tensorrt_fp16"] = Predictor(export_dir, device="gpu", precision="fp16",
                                                                         use_tensorrt=True)
        except UserError as exc:
            skipped.append(f"TensorRT fp16: {exc}")
    else:
        skipped.append("GPU fp32/fp16/TensorRT: no CUDA GPU here")
    return predictors, skipped


def _onnxruntime_version() -> str:
    import onnxruntime

    return onnxruntime.__version__
