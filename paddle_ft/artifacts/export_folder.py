"""The export folder, and the one place its file names are spelt: what `export` writes, `quantize` copies and
rewrites, and the predictor reads.

    model.json (Paddle 3, PIR) or model.pdmodel (Paddle 2.6), model.pdiparams   the static graph and its weights
    model.onnx                                                                  the same graph for ONNX Runtime
    tokenizer files, label_map.json                                             what reads the texts, the labels
    export.json                                                                 `ExportInfo`: metadata and proofs
    MODEL_CARD.md, manifest.json                 the card, every file's sha256 and the provenance (written last)

Imports neither Paddle nor the training code.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from paddle_ft.artifacts.manifest import MANIFEST, versions, write_manifest
from paddle_ft.artifacts.meta import FORMAT_VERSION, ModelMeta, read_json, write_json
from paddle_ft.artifacts.model_card import MODEL_CARD, model_card
from paddle_ft.errors import UserError
from paddle_ft.io import write_text_atomically

EXPORT_INFO = "export.json"
PROGRAM_FILES = ("model.json", "model.pdmodel")
PARAMS_FILE = "model.pdiparams"
ONNX_FILE = "model.onnx"
OUTPUT_NAME = "logits"  # the graphs' output, [batch, labels] float32
DYNAMIC_AXES = ("batch", "sequence")  # the ONNX graph's names for the inputs' dimensions
PARITY_TOLERANCE = 1e-4  # largest logit difference an engine may have from the trained model (export refuses more)
SEALS = (MODEL_CARD, MANIFEST)  # written last, over everything else: what the export is and where it came from
REEXPORT = "re-create it with tools/export.py --model OUT/best --output DIR"


def program_file(export_dir: Path) -> Path:
    """The export's static graph; a folder without one is refused with how to make one."""
    for name in PROGRAM_FILES:
        if (export_dir / name).is_file():
            return export_dir / name
    raise UserError(f"{export_dir} holds no exported model ({' or '.join(PROGRAM_FILES)}); "
                    "create one with tools/export.py --model OUT/best --output DIR")


def params_file(export_dir: Path) -> Path:
    return export_dir / PARAMS_FILE


def onnx_file(export_dir: Path) -> Path:
    return export_dir / ONNX_FILE


@dataclass(frozen=True)
class ExportInfo:
    """`export.json`: the model's metadata and what the export wrote and proved."""

    model: ModelMeta
    program_file: str
    """model.json (Paddle 3, PIR) or model.pdmodel (Paddle 2.6)."""
    paddle_version: str
    source_model: str
    """The saved-model folder it was exported from."""
    inputs: tuple[str, ...] = ("input_ids", "token_type_ids")
    """The graphs' inputs, each [batch, sequence] int64."""
    outputs: tuple[str, ...] = (OUTPUT_NAME,)
    """The graphs' output: logits [batch, labels] float32 (a Paddle 2.6 program keeps jit.save's name)."""
    files: tuple[str, ...] = ()
    """Every file the export wrote besides export.json: what --overwrite may replace."""
    parity_max_abs_diff: float | None = None
    """Largest |logit| difference of the exported graph (CPU predictor) from dygraph."""
    parity_max_abs_diff_gpu: float | None = None
    """The same on the GPU predictor, where a GPU was visible at export."""
    onnx_file: str | None = None
    """model.onnx: the same graph for ONNX Runtime (None when export could not write one, and why in extra)."""
    parity_max_abs_diff_onnx: float | None = None
    """Largest |logit| difference of the ONNX graph (ONNX Runtime) from dygraph."""
    quantization: dict | None = None
    """Set by `paddle_ft quantize`: model.onnx is int8 (served by ONNX Runtime only; the Paddle graph beside it is
    the fp32 one), with how it was quantized and the accuracy check it passed."""
    extra: dict = field(default_factory=dict)
    """Keys of a newer paddle_ft, kept as they are."""

    def as_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**self.extra, **data, "model": self.model.as_dict(), "inputs": list(self.inputs),
                "outputs": list(self.outputs), "files": list(self.files), "format_version": FORMAT_VERSION}


def write_export_info(info: ExportInfo, directory: Path) -> None:
    write_json(directory / EXPORT_INFO, info.as_dict())


def read_export_info(directory: Path) -> ExportInfo:
    """`export.json` of an exported folder, checked."""
    path = directory / EXPORT_INFO
    if not path.is_file():
        raise UserError(f"{path} is missing: {directory} is not a complete export; {REEXPORT}")
    data = read_json(path, REEXPORT)
    known = {f.name for f in dataclasses.fields(ExportInfo)}
    try:
        return ExportInfo(**{k: v for k, v in data.items()
                             if k in known - {"model", "inputs", "outputs", "files", "extra"}},
                          model=ModelMeta.from_dict(data["model"], path, REEXPORT),
                          inputs=tuple(data.get("inputs", ())), outputs=tuple(data.get("outputs", ())),
                          files=tuple(data.get("files", ())),
                          extra={k: v for k, v in data.items() if k not in known | {"format_version"}})
    except (TypeError, KeyError, AttributeError):
        raise UserError(f"{path} is damaged (its fields are not an export's); {REEXPORT}") from None


def seal(folder: Path, info: ExportInfo, name: str, training: dict) -> None:
    """The export's `MODEL_CARD.md` (titled `name`) and `manifest.json` (every file's sha256, the versions that made
    it, the parity of each engine, and `training`: what the trained model's own manifest recorded of its data,
    metrics, seed and config), written once everything else is in `folder`; `info.files` already names both."""
    provenance = {"kind": "export", "source_model": info.source_model, "versions": versions(),
                  "parity": _parity(info), **training}
    write_text_atomically(folder / MODEL_CARD, model_card(name, info.model, provenance, _checks(info)))
    write_manifest(folder, provenance)


def _parity(info: ExportInfo) -> dict:
    """The largest logit difference from the trained model, by engine, as export measured it."""
    measured = {"paddle_inference": info.parity_max_abs_diff, "onnxruntime": info.parity_max_abs_diff_onnx,
                "paddle_inference_gpu": info.parity_max_abs_diff_gpu}
    return {engine: value for engine, value in measured.items() if value is not None}


def _checks(info: ExportInfo) -> str:
    names = {"paddle_inference": "Paddle Inference", "onnxruntime": "ONNX Runtime", "paddle_inference_gpu": "GPU"}
    checks = "; ".join(f"{names[engine]}: {value:.3g}" for engine, value in _parity(info).items()) or "none"
    quantized = "" if info.quantization is None else (
        f"\nThe ONNX graph is int8 ({info.quantization.get('method')} quantization): accuracy "
        f"{info.quantization.get('accuracy_int8'):.4f} against fp32's {info.quantization.get('accuracy_fp32'):.4f}, "
        f"the same answer on {info.quantization.get('agreement'):.2%} of {info.quantization.get('texts')} texts.\n")
    return (f"Largest logit difference from the trained model on a padded sample batch, by engine: {checks}.\n"
            f"{quantized}")
