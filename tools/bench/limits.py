"""How far from the hardware each number is: the machine's matmul rate measured in the bench's own run, the useful
FLOPs of a real token for the bench's shape, and a profile of training steps that says where the rest goes.

Useful FLOPs count the multiply-adds a token needs (2 per multiply-add) in the matmuls of the encoder, over real
tokens only: padding, dropout, norms, activations and the optimizer are the overhead being measured, not work."""
from __future__ import annotations

import collections
import json
import re
import time
from pathlib import Path

GEMM_ROWS = 4096  # tokens of a matmul: a step's batch of texts, flattened


def gemm_shapes(shape: dict) -> tuple[tuple[int, int, int], ...]:
    """The bench shape's own matmuls (tokens x in x out: the FFN's two, the attention projections) and a square one;
    the rate of the fastest is the limit a row is compared with (at 4 x 256 and 12 x 384 alike: the limit follows
    --model-shape)."""
    h, f = shape["hidden_size"], shape["intermediate_size"]
    return (GEMM_ROWS, h, f), (GEMM_ROWS, f, h), (GEMM_ROWS, h, h), (1024, 1024, 1024)


def forward_flops_per_token(shape: dict, mean_length: float) -> float:
    """Matmul FLOPs of one real token through the encoder: per layer the Q, K, V and output projections (4 h^2
    multiply-adds), the FFN (2 h f), and attention's scores and weighted sum over the text's tokens (2 h L)."""
    h, f, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_layers"]
    return 2 * layers * (4 * h * h + 2 * h * f + 2 * h * mean_length)


def train_flops_per_token(shape: dict, mean_length: float) -> float:
    """Forward, and backward's two matmuls per forward one (gradients of the inputs and of the weights)."""
    return 3 * forward_flops_per_token(shape, mean_length)


def gemm_rates(threads: int, seconds_per_shape: float) -> dict:
    """GFLOP/s of the matmul libraries the engines use, on this machine now: fp32 through Paddle (MKL, what training
    and Paddle Inference run), bf16 through paddle_ft's kernels (oneDNN, bf16 training's), fp32 and int8 (VNNI where the CPU has it) through ONNX Runtime (what the fp32 and
    int8 exports run). {library: {"gflops": best over gemm_shapes, "shape": [m, k, n]}}: each shape is called
    again and again for `seconds_per_shape`, in three rounds, and the best round counts."""
    import numpy as np
    import paddle

    rates = {"paddle_fp32": _best(lambda m, k, n: _paddle_matmul(paddle, m, k, n), seconds_per_shape)}
    bf16 = _bf16_kernels()
    if bf16 is not None:  # the bf16 rows' limit: oneDNN's bfloat16 GEMM, as paddle_ft's bf16 training calls it
        rates["paddle_ft_bf16"] = _best(lambda m, k, n: _bf16_gemm(paddle, bf16, m, k, n), seconds_per_shape)
    try:
        import onnxruntime  # noqa: F401  (an optional engine: without it, Paddle's rate alone)
    except ImportError:
        return rates
    rng = np.random.default_rng(0)
    rates["onnxruntime_fp32"] = _best(lambda m, k, n: _onnx_matmul(
        "MatMul", rng.normal(size=(m, k)).astype(np.float32), rng.normal(size=(k, n)).astype(np.float32), threads),
        seconds_per_shape)
    rates["onnxruntime_int8"] = _best(lambda m, k, n: _onnx_matmul(
        "MatMulInteger", rng.integers(0, 255, (m, k), dtype=np.uint8), rng.integers(-127, 127, (k, n), dtype=np.int8),
        threads), seconds_per_shape)
    return rates


def _best(make_call, seconds: float) -> dict:
    from bench.shape import model_shape

    best = {"gflops": 0.0, "shape": None}
    for m, k, n in gemm_shapes(model_shape()):
        call = make_call(m, k, n)
        call()  # first call: allocation, kernel choice
        for _ in range(3):
            calls, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds / 3:
                call()
                calls += 1
            rate = 2 * m * k * n * calls / (time.perf_counter() - started) / 1e9
            if rate > best["gflops"]:
                best = {"gflops": round(rate, 1), "shape": [m, k, n]}
    return best


def _paddle_matmul(paddle, m: int, k: int, n: int):
    a, b = paddle.randn([m, k]), paddle.randn([k, n])
    return lambda: paddle.matmul(a, b)


def _bf16_kernels():
    from paddle_ft import runtime
    from paddle_ft.kernels.fused import kernels

    module = kernels()[0] if runtime.cpu_supports_bf16() else None
    return module if hasattr(module, "paddle_ft_bfloat16_gemm") else None


def _bf16_gemm(paddle, module, m: int, k: int, n: int):
    a, b = module.paddle_ft_to_bfloat16(paddle.randn([m, k])), module.paddle_ft_to_bfloat16(paddle.randn([k, n]))
    return lambda: module.paddle_ft_bfloat16_gemm(a, b, False, False)


def _onnx_matmul(op: str, a, b, threads: int):
    import onnxruntime
    from onnx import TensorProto, helper

    types = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
    out_type = TensorProto.INT32 if op == "MatMulInteger" else TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node(op, ["A", "B"], ["Y"])], "gemm",
                              [helper.make_tensor_value_info("A", types[str(a.dtype)], list(a.shape)),
                               helper.make_tensor_value_info("B", types[str(b.dtype)], list(b.shape))],
                              [helper.make_tensor_value_info("Y", out_type, [a.shape[0], b.shape[1]])])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                           .SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"A": a, "B": b})


OUTSIDE = "outside Paddle's operators"
OPTIMIZER = "optimizer and clipping"
# Paddle's operator names (dygraph kernels, and the grad nodes of backward) by what they do
PROFILE_GROUPS = (
    ("matmul", ("matmul", "addmm", "fastlinear", "linear", "bmm")),
    (OPTIMIZER, ("paddle_ft_clip", "paddle_ft_adamw")),  # the fused kernels of the optimizer's step
    ("fused kernels (paddle_ft)", ("paddle_ft_", "customop")),
    ("dropout", ("dropout",)),
    ("layer norm", ("layer_norm", "layernorm")),
    ("GELU", ("gelu",)),
    ("softmax", ("softmax",)),
    (OPTIMIZER, ("adamw", "square", "add_n", "sqrt", "multiply_", "clip", "sum")),
    ("element-wise adds", ("add",)),
)


def profile_groups(trace: Path, skip_steps: int) -> dict:
    """{group: share of the steps' wall time} over the optimizer steps of a Paddle profiler trace (Chrome format)
    after the first `skip_steps` (start-up and warm-up): top-level operators only, each in the first group whose
    markers its name contains ("other" when none); the fused kernels' forwards, which the profiler does not record as
    operators, by the spans paddle_ft's kernels leave (PythonOp events named after the operator); "outside Paddle's
    operators" is the rest: Python and dispatch. "steps" and "seconds" say what was summed."""
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    steps = sorted(e["ts"] for e in events if e.get("cat") == "Optimization")
    if len(steps) <= skip_steps + 1:
        raise ValueError(f"{trace}: {len(steps)} optimizer steps, fewer than the {skip_steps} to skip and one more")
    begin, end = steps[skip_steps], steps[-1]
    totals: collections.Counter = collections.Counter()
    reach = -1.0  # the end of the last top-level operator: what starts before it is nested inside it
    # an optimizer step's span holds its operators (Paddle's AdamW, one per parameter) or the fused kernel's update
    spans = (e for e in events if e.get("cat") in ("Operator", "Optimization", "PythonOp"))
    for event in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):  # of two starting together, the outer first
        if event["ts"] < reach:
            continue
        reach = event["ts"] + event["dur"]
        if begin <= event["ts"] < end:
            name = re.sub(r"[ \[].*", "", event["name"]).lower()
            group = OPTIMIZER if event.get("cat") == "Optimization" else \
                next((title for title, marks in PROFILE_GROUPS if any(mark in name for mark in marks)), "other")
            totals[group] += event["dur"]
    wall = end - begin
    totals[OUTSIDE] = max(0.0, wall - sum(totals.values()))
    shares = {group: round(value / wall, 4) for group, value in totals.most_common()}
    return {"shares": shares, "steps": len(steps) - 1 - skip_steps, "seconds": round(wall / 1e6, 2)}
