"""Is an export still what was written? Its files against its manifest, and its two engines against each other on
a sample batch: what `verify` checks, and what the server checks of a model before it swaps it in."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from paddle_ft.artifacts.export_folder import ONNX_FILE, PARITY_TOLERANCE, read_export_info
from paddle_ft.artifacts.manifest import MANIFEST, differences, read_manifest
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor


def export_problems(folder: Path) -> list[str]:
    """One line per difference between `folder` and what was written: its files against `manifest.json`, then (the
    files being as written) Paddle Inference against ONNX Runtime. An export without a manifest (written before
    paddle_ft wrote them) is one problem."""
    if not (folder / MANIFEST).is_file():
        return [f"{folder} has no {MANIFEST}: export it again with this paddle_ft to have one"]
    problems = differences(folder, read_manifest(folder))
    if not problems:
        _, problem = engines_agree(folder)
        problems += [problem] if problem else []
    return problems


def engines_agree(folder: Path, rows: int = 8, seed: int = 0) -> tuple[float | None, str | None]:
    """(the largest logit difference between the two engines on a sample batch, a problem line or None); (None,
    None) where there is one engine, or an int8 ONNX graph that differs from the fp32 one by design."""
    info = read_export_info(folder)
    if info.onnx_file is None or info.quantization is not None or not (folder / ONNX_FILE).is_file():
        return None, None
    paddle = Predictor(folder, PredictOptions(backend="paddle"))
    onnx = Predictor(folder, PredictOptions(backend="onnxruntime"))
    rng = np.random.default_rng(seed)
    vocabulary, pad = paddle.tokenizer.vocab_size, paddle.tokenizer.pad_token_id
    input_ids = rng.integers(0, vocabulary, size=(rows, info.model.max_length))
    input_ids[input_ids == pad] = (pad + 1) % vocabulary
    input_ids[1:, info.model.max_length // 2:] = pad  # most rows padded, as batches are
    token_type_ids = np.zeros_like(input_ids)
    worst = float(np.abs(paddle.run(input_ids, token_type_ids) - onnx.run(input_ids, token_type_ids)).max())
    if worst > 2 * PARITY_TOLERANCE:  # each was within PARITY_TOLERANCE of the trained model at export
        return worst, (f"{folder}: Paddle Inference and ONNX Runtime now differ by {worst:.3g} (more than "
                       f"{2 * PARITY_TOLERANCE:g}): the graphs or this machine's engines changed since export")
    return worst, None
