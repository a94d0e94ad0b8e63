"""TensorRT for `.pdmodel` exports (Paddle 2.6): shape ranges collected once from real runs, engines cached.

Dynamic-shape ranges set on the two inputs only fail when the graph splits into several TensorRT
subgraphs ("some trt inputs dynamic shape info not set"): every intermediate tensor needs its range.
Paddle Inference records them all when a plain GPU predictor runs with `collect_shape_range_info`;
`enable_tuned_tensorrt_dynamic_shape` then builds the engines from that file, and `use_static` keeps them
in a cache folder so the next start does not rebuild them. The cache is keyed by the weights and the
max length, under ~/.cache/paddle_ft/tensorrt. Not run here: no GPU, and Paddle 3.3 cannot write a .pdmodel
export to try it with (jit.save with FLAGS_enable_pir_api=0 fails inside matmul). Paddle 3 exports
(`model.json`) are refused before this is reached (`infer.check_tensorrt`).
"""
from __future__ import annotations

import gc
import hashlib
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.export_folder import PARAMS_FILE

BATCHES = (1, 8, 32, 64)  # the batch sizes the collection run covers (the engine accepts 1..64)
CACHE = Path("~/.cache/paddle_ft/tensorrt").expanduser()


def configure(config, inference, program: Path, gpu_id: int, precision: str, max_length: int,
              width_step: int) -> None:
    """Turn `config` (GPU already enabled) into a TensorRT config with tuned dynamic shapes."""
    params = program.with_name(PARAMS_FILE)
    folder = _cache_folder(params, max_length)
    shapes = folder / "shape_range_info.pbtxt"
    if not shapes.is_file():
        _collect_shapes(inference, program, params, gpu_id, max_length, width_step, shapes)
    mode = inference.PrecisionType.Half if precision == "fp16" else inference.PrecisionType.Float32
    config.enable_tensorrt_engine(workspace_size=1 << 30, max_batch_size=max(BATCHES), min_subgraph_size=3,
                                  precision_mode=mode, use_static=True, use_calib_mode=False)
    config.set_optim_cache_dir(str(folder))
    config.enable_tuned_tensorrt_dynamic_shape(str(shapes), True)  # True: a shape outside the ranges rebuilds


def _cache_folder(params: Path, max_length: int) -> Path:
    digest = hashlib.sha256(f"{params.stat().st_size}:{max_length}:".encode())
    with params.open("rb") as handle:
        digest.update(handle.read(1 << 20))  # the first MiB of the weights tells exports apart cheaply
    folder = CACHE / digest.hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _collect_shapes(inference, program: Path, params: Path, gpu_id: int, max_length: int, width_step: int,
                    shapes: Path) -> None:
    """Run a plain GPU predictor over every batch size and padded width the Predictor will use."""
    config = inference.Config(str(program), str(params))
    config.enable_use_gpu(256, gpu_id)
    config.disable_glog_info()
    config.collect_shape_range_info(str(shapes))
    predictor = inference.create_predictor(config)
    handles = [predictor.get_input_handle(name) for name in predictor.get_input_names()]
    for batch in BATCHES:
        for width in sorted({*range(width_step, max_length, width_step), max_length}):
            ids = np.ones((batch, width), dtype=np.int64)  # [batch, seq]: any in-vocabulary id
            for handle, array in zip(handles, (ids, np.zeros_like(ids))):
                handle.reshape(array.shape)
                handle.copy_from_cpu(array)
            predictor.run()
    del predictor  # the ranges are written when the predictor is destroyed
    gc.collect()
