"""The engines that run an exported graph: Paddle Inference, or ONNX Runtime on the same graph converted by
paddle2onnx at export. Each is a callable (input_ids, token_type_ids) [batch, seq] int64 -> logits
[batch, labels] float32; `Predictor` tokenises around it.

Why two: at batch 1 on CPU, Paddle Inference spends most of a call in per-operator overhead (each oneDNN
primitive of a small BERT costs 50-90 us whatever its size; see docs/performance.md for the profile), where ONNX
Runtime runs the whole graph in a fraction of it. Paddle Inference is still the engine for GPUs, TensorRT and
oneDNN bf16.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.export_folder import DYNAMIC_AXES, ONNX_FILE, PARAMS_FILE, REEXPORT
from paddle_ft.errors import UserError, first_line
from paddle_ft.inference.options import PredictOptions
from paddle_ft.log import native_output_captured
from paddle_ft.runtime import usable_cores

BACKENDS = ("auto", "paddle", "onnxruntime")


def choose_backend(backend: str | None, export_dir: Path, device: str, precision: str, quantized: bool = False) -> str:
    """`backend` as asked, checked; None or auto = every engine that can run the request, each call on the one
    fastest at its size (`routing`): ONNX Runtime and Paddle Inference for fp32 on CPU where the export has an ONNX
    graph and onnxruntime is installed ("auto"), else the one that can ("paddle"; "onnxruntime" for an int8 export,
    which runs there only)."""
    if backend not in (None, *BACKENDS):
        raise UserError(f"backend '{backend}': choose one of {', '.join(BACKENDS)}")
    if quantized and backend == "paddle":
        raise UserError(f"{export_dir} is quantized to int8 for ONNX Runtime (its Paddle graph is the fp32 one): "
                        "serve it with backend onnxruntime, or serve the fp32 export with paddle")
    if quantized:
        backend = "onnxruntime"
    onnx_ready = (export_dir / ONNX_FILE).is_file() and _onnxruntime_installed()
    if backend in (None, "auto"):
        return "auto" if device == "cpu" and precision == "fp32" and onnx_ready else "paddle"
    if backend == "onnxruntime":
        if device != "cpu" or precision != "fp32":
            raise UserError(f"backend onnxruntime runs fp32 on CPU here; for --device {device} --precision "
                            f"{precision} use --backend paddle")
        if not (export_dir / ONNX_FILE).is_file():
            raise UserError(f"{export_dir} has no {ONNX_FILE} (exported without onnxruntime installed, or by an older "
                            f"paddle_ft); {REEXPORT}, or use --backend paddle")
        if not onnx_ready:
            raise UserError("backend onnxruntime asked for, but onnxruntime is not installed: pip install onnxruntime")
    return backend


def onnxruntime_engine(export_dir: Path, cpu_threads: int | None, spinning: bool = True):
    """An ONNX Runtime session on the export's ONNX graph, as a (input_ids, token_type_ids) -> logits callable.
    Without `spinning`, its worker threads sleep as soon as a call ends instead of spinning for the next one: where
    another engine shares the process (backend auto), spinning threads take the cores from that engine's calls."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = cpu_threads or usable_cores(), 1
    if not spinning:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    options.log_severity_level = 3  # errors only: it warns about initialisers paddle2onnx left unused
    try:
        session = onnxruntime.InferenceSession(str(export_dir / ONNX_FILE), options,
                                               providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for a damaged graph
        raise UserError(f"{export_dir / ONNX_FILE} cannot be loaded ({first_line(exc)}); {REEXPORT}") from None
    names = [node.name for node in session.get_inputs()]

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        return session.run(None, dict(zip(names, (input_ids, token_type_ids))))[0]

    return run


def write_onnx(program: Path, onnx_path: Path) -> None:
    """The exported Paddle graph converted by paddle2onnx (opset 17, the first with LayerNormalization as one op:
    opset 13 spells it out in seven, ~1.5x slower at batch 32 here). Its own graph optimiser is off: ONNX Runtime
    optimises the graph when it loads it, and paddle2onnx's tools either pip-install packages (polygraphy) or fail
    on this version pair (onnxoptimizer). paddle2onnx prints progress from C++: kept out of the export's output,
    and shown only when the conversion fails."""
    import paddle2onnx

    with native_output_captured() as captured:
        try:
            paddle2onnx.export(str(program), str(program.parent / PARAMS_FILE), save_file=str(onnx_path),
                               opset_version=17, optimize_tool="None")
            failure = None
        except Exception as exc:  # paddle2onnx raises assorted errors for an op it cannot convert
            failure = first_line(exc)
    if failure is not None or not onnx_path.is_file():
        sys.stderr.write(captured())  # what it printed before failing: the context of the one-line error
        raise UserError(f"paddle2onnx could not convert {program} ({failure or 'no file written'}); export with "
                        "--no-onnx to skip the ONNX graph, and report this with your paddle2onnx version")
    _name_dynamic_axes(onnx_path)


def _name_dynamic_axes(onnx_path: Path) -> None:
    """paddle2onnx calls the free dimensions DynamicDimension.0, .1, ... (a new name for each, as if the two
    inputs' batches could differ): name them `batch` and `sequence`, as code written against the graph expects."""
    import onnx

    model = onnx.load(str(onnx_path))
    for value in [*model.graph.input, *model.graph.output]:
        for dim, name in zip(value.type.tensor_type.shape.dim, DYNAMIC_AXES):
            if not dim.HasField("dim_value"):  # the output's labels dimension is fixed
                dim.dim_param = name
    onnx.save(model, str(onnx_path))


def onnx_export_possible() -> str | None:
    """None when export can write and check an ONNX graph; else why not."""
    try:
        import paddle2onnx  # noqa: F401
    except ImportError:
        return "paddle2onnx is not installed"
    return None if _onnxruntime_installed() else "onnxruntime is not installed"


def _onnxruntime_installed() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def paddle_engine(program: Path, options: PredictOptions, enable_onednn: bool, max_length: int, width_step: int):
    """A Paddle Inference predictor on the exported graph, as a (input_ids, token_type_ids) -> logits callable."""
    from paddle import inference

    config = inference.Config(str(program), str(program.with_name(PARAMS_FILE)))
    if options.device == "gpu":
        _configure_gpu(config, inference, program, options, max_length, width_step)
    else:
        config.disable_gpu()
        if enable_onednn:
            config.enable_mkldnn()  # oneDNN kernels; see docs/performance.md for what they give on which CPU
            if options.precision == "bf16":
                config.enable_mkldnn_bfloat16()
        config.set_cpu_math_library_num_threads(options.cpu_threads or usable_cores())
    config.switch_ir_optim(True)
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    # zero-copy tensor handles, looked up once: each call writes straight into the predictor's inputs
    inputs = [predictor.get_input_handle(name) for name in predictor.get_input_names()]
    output = predictor.get_output_handle(predictor.get_output_names()[0])

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        for handle, array in zip(inputs, (input_ids, token_type_ids)):
            handle.reshape(array.shape)
            handle.copy_from_cpu(array)
        predictor.run()
        return output.copy_to_cpu()

    return run


def _configure_gpu(config, inference, program: Path, options: PredictOptions, max_length: int,
                   width_step: int) -> None:
    config.enable_use_gpu(256, options.gpu_id)  # 256 MB initial memory pool, grown on demand
    if options.use_tensorrt:
        if not inference.get_trt_compile_version()[0]:
            raise UserError("TensorRT asked for, but this paddle build was compiled without it")
        from paddle_ft.inference import tensorrt

        tensorrt.configure(config, inference, program, options.gpu_id, options.precision, max_length, width_step)
    elif options.precision == "fp16":
        config.enable_use_gpu(256, options.gpu_id, inference.PrecisionType.Half)
