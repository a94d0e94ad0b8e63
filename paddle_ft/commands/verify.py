"""`verify`: is a folder still what paddle_ft wrote? Every file against its `manifest.json` (sha256), and for an
export the two engines against each other again. Each difference is one line; any makes the command fail."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.export_folder import EXPORT_INFO, ONNX_FILE, read_export_info
from paddle_ft.artifacts.manifest import differences, read_manifest
from paddle_ft.export import PARITY_TOLERANCE
from paddle_ft.inference.predictor import Predictor


def run(folder: str) -> int:
    folder = Path(folder)
    manifest = read_manifest(folder)
    problems = differences(folder, manifest)
    agreement = None
    if not problems and (folder / EXPORT_INFO).is_file():
        agreement, problem = _engines_agree(folder)
        problems += [problem] if problem else []
    for line in problems:
        print(f"error: verify: {line}", file=sys.stderr)
    if problems:
        return 1
    engines = "" if agreement is None else f"; Paddle Inference and ONNX Runtime agree to {agreement:.3g}"
    print(f"verified {folder}: its {len(manifest['files'])} files are as written{engines}")
    return 0


def _engines_agree(folder: Path, rows: int = 8, seed: int = 0) -> tuple[float | None, str | None]:
    """(the largest logit difference between the two engines on a sample batch, a problem line or None); (None,
    None) where there is one engine, or an int8 ONNX graph that differs from the fp32 one by design."""
    info = read_export_info(folder)
    if info.onnx_file is None or info.quantization is not None or not (folder / ONNX_FILE).is_file():
        return None, None
    paddle, onnx = Predictor(folder, backend="paddle"), Predictor(folder, backend="onnxruntime")
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
