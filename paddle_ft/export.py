"""Export a trained model folder to a self-contained Paddle Inference folder, proven equal to dygraph."""
from __future__ import annotations

import contextlib
import functools
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import paddle
from paddle.static import InputSpec

from paddle_ft.artifacts.bundle import load_bundle
from paddle_ft.artifacts.export_folder import (EXPORT_INFO, ONNX_FILE, OUTPUT_NAME, PARITY_TOLERANCE, SEALS, ExportInfo,
                                               program_file, read_export_info, seal, write_export_info)
from paddle_ft.artifacts.manifest import training_provenance
from paddle_ft.artifacts.run import RUN_FILES
from paddle_ft.errors import UserError
from paddle_ft.inference.backends import onnx_export_possible, write_onnx
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.io import atomic_directory, check_output_folder, claimed
from paddle_ft.log import native_output_captured

# a warning Paddle's C++ prints on a process's first jit.save of our models (and of others'), which asks nothing of
# the user: the parity check below is what proves the traced graph
_PIR_OUT_TENSOR_WARNING = re.compile(r"^W[0-9 :.]+\S+\] Paddle static graph\(PIR\) not support input out tensor.*\n",
                                     re.MULTILINE)
# the GPU predictor's kernels may compute float32 matmuls in TF32 on Ampere and newer (10 mantissa bits), moving
# logits by ~1e-3; not measured here (no GPU), hence a bound this loose
GPU_PARITY_TOLERANCE = 1e-2
INPUT_SPEC = (InputSpec([None, None], "int64", "input_ids"),        # [batch, seq] token ids
              InputSpec([None, None], "int64", "token_type_ids"))  # [batch, seq] segment ids


class ParityError(UserError):
    """The exported graph does not reproduce the dygraph logits."""


def export_model(model_dir: Path, output_dir: Path, tolerance: float = PARITY_TOLERANCE,
                 overwrite: bool = False, onnx: bool = True) -> ExportInfo:
    """jit.save `model_dir` into `output_dir` with tokenizer, labels and `export.json` (and with `onnx` the same
    graph as model.onnx), then check parity.

    The folder appears only if the exported logits match dygraph within `tolerance`. An existing
    `output_dir` is replaced only when it holds an earlier export and nothing else, and `overwrite` is set.
    """
    check_export_target(Path(output_dir), Path(model_dir), overwrite)
    with claimed(output_dir, "--output"), _on_cpu():  # a second export into it meanwhile is refused, not lost
        check_export_target(Path(output_dir), Path(model_dir), overwrite)  # as it is now, under the claim
        return _export(Path(model_dir), Path(output_dir), tolerance, onnx)


def name_the_output(program: Path) -> None:
    """The graph's output named `OUTPUT_NAME` ("logits") instead of jit.save's `fetch_name_0`, so code written
    against the export (Paddle Inference's get_output_handle, ONNX Runtime's output, which paddle2onnx names after
    it) reads what it gets. A Paddle 3 (PIR) program is JSON whose fetch operation carries the name; a Paddle 2.6
    `.pdmodel` keeps jit.save's name."""
    if program.suffix != ".json":
        return
    graph = json.loads(program.read_text(encoding="utf-8"))
    fetches = list(_operations(graph, "1.fetch"))
    if len(fetches) != 1:
        raise RuntimeError(f"{program}: expected one fetch operation in the saved program, found {len(fetches)}")
    for attribute in fetches[0]["A"]:
        if attribute["N"] == "name":
            attribute["AT"]["D"] = OUTPUT_NAME
    program.write_text(json.dumps(graph, separators=(",", ":")), encoding="utf-8")


def _operations(node, kind: str):
    """Every operation of type `kind` in a PIR program's JSON, nested blocks included."""
    if isinstance(node, dict):
        if node.get("#") == kind:
            yield node
        for value in node.values():
            yield from _operations(value, kind)
    elif isinstance(node, list):
        for value in node:
            yield from _operations(value, kind)


def without_known_warnings(printed: str) -> str:
    """What jit.save printed, less the warning that says nothing to the user."""
    return _PIR_OUT_TENSOR_WARNING.sub("", printed)


def _export(model_dir: Path, output_dir: Path, tolerance: float, onnx: bool) -> ExportInfo:
    bundle = load_bundle(model_dir)
    model, meta = bundle.model, bundle.meta
    _drop_dropout(model)
    with atomic_directory(output_dir) as tmp:
        with native_output_captured(write_back=without_known_warnings):
            paddle.jit.save(model, str(tmp / "model"), input_spec=INPUT_SPEC)
        name_the_output(program_file(tmp))
        bundle.tokenizer.save_pretrained(str(tmp))
        bundle.label_map.save(tmp)
        info = ExportInfo(meta, program_file(tmp).name, paddle.__version__, str(model_dir),
                          inputs=tuple(spec.name for spec in INPUT_SPEC))
        write_export_info(info, tmp)  # the predictor of the parity check reads it
        # the encoder's vocab_size, not the tokenizer's: not every tokenizer has a `.vocab` (RoBERTa BPE)
        check = functools.partial(parity_max_abs_diff, model, vocab_size=model.encoder.config.vocab_size,
                                  pad_token_id=bundle.tokenizer.pad_token_id, max_length=meta.max_length)
        info = replace(info, parity_max_abs_diff=check(Predictor(tmp, PredictOptions(backend="paddle"))))
        if _gpu_visible():  # the export will likely be served on this GPU: check that path too
            info = replace(info, parity_max_abs_diff_gpu=check(Predictor(tmp, PredictOptions(device="gpu"))))
        info = _with_onnx(info, tmp, check) if onnx else replace(info, extra={"onnx_skipped": "--no-onnx"})
        written = [p.name for p in tmp.iterdir() if p.name != EXPORT_INFO]
        info = replace(info, files=tuple(sorted({*written, *SEALS})))
        write_export_info(info, tmp)
        if not info.parity_max_abs_diff <= tolerance:
            raise ParityError(f"exported model differs from dygraph by {info.parity_max_abs_diff:.3g} "
                              f"(> {tolerance:g}); nothing was written to {output_dir}. Report this with your paddle "
                              "version")
        if info.parity_max_abs_diff_onnx is not None and not info.parity_max_abs_diff_onnx <= tolerance:
            raise ParityError(f"the ONNX graph differs from dygraph by {info.parity_max_abs_diff_onnx:.3g} "
                              f"(> {tolerance:g}); nothing was written to {output_dir}. Report this with your "
                              "paddle2onnx version")
        if info.parity_max_abs_diff_gpu is not None and not info.parity_max_abs_diff_gpu <= GPU_PARITY_TOLERANCE:
            raise ParityError(f"the export on the GPU predictor differs from dygraph by "
                              f"{info.parity_max_abs_diff_gpu:.3g} (> {GPU_PARITY_TOLERANCE:g}); nothing was written "
                              f"to {output_dir}")
        seal(tmp, info, Path(output_dir).name, training_provenance(Path(model_dir)))
    return info


def _with_onnx(info: ExportInfo, folder: Path, check) -> ExportInfo:
    """The graph converted to ONNX beside the Paddle one, and its parity under ONNX Runtime; where paddle2onnx or
    onnxruntime is missing, the export says why instead (export.json: onnx_skipped)."""
    missing = onnx_export_possible()
    if missing is not None:
        return replace(info, extra={**info.extra, "onnx_skipped": missing})
    write_onnx(folder / info.program_file, folder / ONNX_FILE)
    onnx = Predictor(folder, PredictOptions(backend="onnxruntime"))
    return replace(info, onnx_file=ONNX_FILE, parity_max_abs_diff_onnx=check(onnx))


@contextlib.contextmanager
def _on_cpu():
    """Both sides of the parity check on the CPU. In a CUDA build the model would load onto the GPU, whose
    matmuls (cuDNN/cuBLAS kernels, TF32 where train.amp.tf32 or the GPU's defaults allow it) can differ from the
    CPU predictor by more than a 1e-4 check allows, for no fault of the export. The exported graph itself does
    not depend on the device."""
    previous = paddle.device.get_device()
    paddle.device.set_device("cpu")
    try:
        yield
    finally:
        paddle.device.set_device(previous)


def _gpu_visible() -> bool:
    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def check_export_target(output_dir: Path, model_dir: Path, overwrite: bool) -> None:
    """Refuse an `--output` whose replacement would delete anything this export did not write."""
    check_output_folder(output_dir, "--output")
    target, model = output_dir.resolve(), model_dir.resolve()
    if target == model or target in model.parents:
        raise UserError(f"--output {output_dir} would replace the model folder {model_dir}; export into a new "
                        f"folder such as {model_dir.parent / 'export'}")
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    run_file = next((name for name in RUN_FILES if (output_dir / name).exists()), None)
    if run_file is not None:
        raise UserError(f"--output {output_dir} holds a training run or a model ({run_file}); export into a new "
                        f"folder such as {output_dir / 'export'}")
    written = _export_files(output_dir)
    if written is None:
        raise UserError(f"--output {output_dir} is a folder that holds other files and no export; export into a "
                        "new or empty folder")
    stray = sorted(p.name for p in output_dir.iterdir() if p.name not in written)
    if stray:
        raise UserError(f"--output {output_dir} holds an export plus files it did not write ({', '.join(stray[:3])}); "
                        "move them away or export into a new folder")
    if not overwrite:
        raise UserError(f"--output {output_dir} already holds an export; pass --overwrite to replace it, or "
                        "export into a new folder")


def _export_files(folder: Path) -> set[str] | None:
    """Names an earlier export wrote into `folder` (from its export.json), or None if it is not one."""
    try:
        files = read_export_info(folder).files
    except UserError:
        return None
    return {EXPORT_INFO, *files} if files else None


def _drop_dropout(model: paddle.nn.Layer) -> None:
    """Dropout is the identity at inference, but each one stays an op in the exported graph (14 in a
    4-layer BERT, ~1 ms per call at batch 1 on CPU). With p = 0 Paddle emits no op at all."""
    for layer in model.sublayers(include_self=True):
        if isinstance(layer, paddle.nn.Dropout):
            layer.p = 0.0
        elif isinstance(layer, paddle.nn.MultiHeadAttention):
            layer.dropout = 0.0  # a float: attention weights go through F.dropout


@paddle.no_grad()
def parity_max_abs_diff(model, predictor: Predictor, vocab_size: int, pad_token_id: int, max_length: int,
                        batch_size: int = 8, seed: int = 0) -> float:
    """Largest |logit| difference between dygraph and the exported graph on a padded sample batch."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, max_length + 1, size=batch_size)
    lengths[0] = max_length  # one full-length row; the others are padded to it
    input_ids = np.full((batch_size, max_length), pad_token_id, dtype=np.int64)  # [batch, seq]
    for row, length in enumerate(lengths):
        tokens = rng.integers(0, vocab_size, size=length)
        input_ids[row, :length] = np.where(tokens == pad_token_id, (pad_token_id + 1) % vocab_size, tokens)
    token_type_ids = np.zeros_like(input_ids)  # [batch, seq]
    for row in range(1, batch_size, 2):  # every other row a pair: segment 1 from a random point on
        token_type_ids[row, rng.integers(1, lengths[row]):lengths[row]] = 1
    model.eval()
    expected = model(paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids)).numpy()
    actual = predictor.run(input_ids, token_type_ids)
    return float(np.max(np.abs(expected - actual)))
