"""INT8 post-training quantization of an export's ONNX graph for ONNX Runtime, proven on labelled texts.

    python -m paddle_ft quantize --model OUT/export --data test.tsv --output OUT/export-int8

The graph is first optimised by ONNX Runtime (its constants become initializers, so the weights can be found),
then its MatMul weights are quantized to int8. `dynamic` (the default) quantizes each batch's activations at run
time, from their own range, so it needs no calibration; `static` fixes the activation ranges from `--calibration`
texts. On the demo model dynamic was the faster and the more faithful of the two (docs/performance.md). The result
is written only if its accuracy on `--data` is within `max_drop` points of the fp32 export's and it gives the fp32
export's answer on at least `min_agreement` of those texts.
"""
from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.export_folder import (EXPORT_INFO, ONNX_FILE, REEXPORT, SEALS, read_export_info, seal,
                                               write_export_info)
from paddle_ft.artifacts.manifest import training_provenance
from paddle_ft.data.readers import Columns, format_of, read_examples, read_texts
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.io import atomic_directory, new_output_folder
from paddle_ft.text import pad_ids

METHODS = ("dynamic", "static")


class AccuracyDropped(UserError):
    """The quantized model loses more accuracy than allowed; nothing was written."""


def quantize_export(export_dir: Path, data: Path, output_dir: Path, method: str = "dynamic",
                    calibration: Path | None = None, max_drop: float = 1.0, min_agreement: float = 0.99) -> dict:
    """Write `output_dir`: the export with its ONNX graph quantized to int8. Returns the accuracy check (also
    in its export.json, key "quantization"). Refused, with nothing written, when accuracy on `data` drops by
    more than `max_drop` points, or when int8 gives the fp32 model's answer (label, or label set) on less than
    `min_agreement` of its texts: equal accuracy can hide different answers."""
    info = read_export_info(export_dir)
    if info.onnx_file is None or not (export_dir / ONNX_FILE).is_file():
        raise UserError(f"{export_dir} has no {ONNX_FILE} to quantize; {REEXPORT} (without --no-onnx)")
    if info.quantization is not None:
        raise UserError(f"{export_dir} is already quantized; quantize the fp32 export it came from")
    if method == "static" and calibration is None:
        raise UserError("--method static fixes activation ranges from real texts: give --calibration FILE")
    with new_output_folder(output_dir, "--output", "quantize into a new folder"):  # no other writer meanwhile
        reference = Predictor(export_dir, PredictOptions(backend="onnxruntime"))
        examples = labelled(data, info.model)
        with atomic_directory(output_dir) as tmp:
            for name in (*(n for n in info.files if n not in SEALS), EXPORT_INFO):  # the seals are written anew
                shutil.copy2(export_dir / name, tmp / name)
            _quantize_onnx(export_dir / ONNX_FILE, tmp / ONNX_FILE, method, calibration, reference)
            check = _compare(reference, Predictor(tmp, PredictOptions(backend="onnxruntime")), examples, info.model)
            check.update(method=method, data=str(data), source_export=str(export_dir))
            quantized = dataclasses.replace(info, quantization=check, files=tuple(sorted({*info.files, *SEALS})))
            write_export_info(quantized, tmp)
            if check["agreement"] < min_agreement:
                raise AccuracyDropped(f"int8 gives the fp32 model's answer on {check['agreement']:.2%} of the "
                                      f"{check['texts']} texts of {data}, less than --min-agreement {min_agreement:g}; "
                                      f"nothing was written to {output_dir}")
            drop = 100 * (check["accuracy_fp32"] - check["accuracy_int8"])
            if drop > max_drop:
                raise AccuracyDropped(f"int8 accuracy on {data} is {check['accuracy_int8']:.4f} against fp32's "
                                      f"{check['accuracy_fp32']:.4f}: {drop:.2f} points lost, more than --max-drop "
                                      f"{max_drop:g}; nothing was written to {output_dir}")
            seal(tmp, quantized, Path(output_dir).name, training_provenance(export_dir))
        return check


def _quantize_onnx(source: Path, target: Path, method: str, calibration: Path | None, reference: Predictor) -> None:
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    optimised = target.with_name("optimised.onnx")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath, options.log_severity_level = str(optimised), 3
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    # the graph's intermediate tensors carry no type after ORT's fusions: they are all float
    extra = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    quiet = logging.getLogger()  # the quantizer logs every tensor it leaves alone, at INFO, on the root logger
    level, quiet.level = quiet.level, logging.ERROR
    try:
        if method == "dynamic":
            quantize_dynamic(str(optimised), str(target), weight_type=QuantType.QInt8, extra_options=extra)
        else:
            quantize_static(str(optimised), str(target), _CalibrationBatches(calibration, reference),
                            quant_format=QuantFormat.QOperator, op_types_to_quantize=["MatMul"],
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, extra_options=extra)
    finally:
        quiet.setLevel(level)
        optimised.unlink(missing_ok=True)


class _CalibrationBatches:
    """onnxruntime's CalibrationDataReader over the texts of a file, 16 to a batch."""

    def __init__(self, path: Path, predictor: Predictor):
        texts = read_texts(path, predictor.meta.text_column, header=predictor.meta.header)[0]
        encoded = predictor.tokenizer(texts, max_length=predictor.max_length, truncation=True)
        ids, types = encoded["input_ids"], encoded["token_type_ids"]
        self._batches = iter([dict(zip(("input_ids", "token_type_ids"),
                                       pad_ids(ids[i:i + 16], types[i:i + 16], predictor.tokenizer.pad_token_id)))
                              for i in range(0, len(texts), 16)])

    def get_next(self) -> dict | None:
        return next(self._batches, None)


def labelled(path: Path, meta) -> list:
    """The examples of a labelled file, read with the columns and labels of the model `meta` describes."""
    examples, _ = read_examples(path, format_of(path, meta.format), Columns.of(meta, meta.multi_label),
                                frozenset(meta.labels))
    return examples


def labelled_accuracy(predictor: Predictor, path: Path) -> tuple[float, int, bool]:
    """(accuracy of `predictor` on the labelled file `path` (subset accuracy for a multi-label model), its texts,
    whether the model is multi-label)."""
    examples = labelled(path, predictor.meta)
    return scored(predictor, examples)[0], len(examples), predictor.meta.multi_label


def scored(predictor: Predictor, examples: list) -> tuple[float, list]:
    """(accuracy of `predictor` on `examples` (subset accuracy for a multi-label model), its answers: a label, or a
    set of labels, per example)."""
    meta = predictor.meta
    answers = [_answer(p, meta) for p in _predictions(predictor, examples, meta)]
    return float(np.mean([a == _gold(e, meta) for a, e in zip(answers, examples)])), answers


def _compare(fp32: Predictor, int8: Predictor, examples: list, meta) -> dict:
    """Accuracy of each (subset accuracy for multi-label), how often they answer alike, and the largest
    probability difference."""
    before, after = _predictions(fp32, examples, meta), _predictions(int8, examples, meta)
    gold = [_gold(e, meta) for e in examples]
    difference = max(float(np.abs(x.vector - y.vector).max()) for x, y in zip(before, after))
    return {"accuracy_fp32": float(np.mean([_answer(p, meta) == g for p, g in zip(before, gold)])),
            "accuracy_int8": float(np.mean([_answer(p, meta) == g for p, g in zip(after, gold)])),
            "agreement": float(np.mean([_answer(a, meta) == _answer(b, meta) for a, b in zip(before, after)])),
            "max_probability_difference": float(difference), "texts": len(examples)}


def _predictions(predictor: Predictor, examples: list, meta) -> list:
    text_pair = [e.text_pair for e in examples] if meta.takes_text_pair else None
    return predictor.predict([e.text for e in examples], text_pair=text_pair)


def _answer(prediction, meta):
    return frozenset(prediction.labels) if meta.multi_label else prediction.label


def _gold(example, meta):
    return frozenset(example.label) if meta.multi_label else example.label
