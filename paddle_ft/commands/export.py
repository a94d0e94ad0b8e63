"""`export`: a trained model as a static graph for Paddle Inference (and ONNX Runtime), proven to give its answers
(`paddle_ft/export.py` does the work)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.commands.flags import model_argument
from paddle_ft.export import export_model


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--output", required=True, help="the export folder to create (new or empty)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in --output")
    parser.add_argument("--no-onnx", action="store_true", help="write no ONNX graph (the onnxruntime backend then "
                                                               "cannot serve the export)")


def main(args) -> int:
    info = export_model(Path(args.model), Path(args.output), overwrite=args.overwrite, onnx=not args.no_onnx)
    onnx = f", ONNX graph {info.parity_max_abs_diff_onnx:.3g}" if info.onnx_file else \
        f" (no ONNX graph: {info.extra.get('onnx_skipped')})"
    print(f"exported to {args.output}: max abs logit difference vs dygraph {info.parity_max_abs_diff:.3g}{onnx}")
    return 0
