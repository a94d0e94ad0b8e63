"""`export`: a trained model as a static graph for Paddle Inference (and ONNX Runtime), proven to give its answers
(`paddle_ft/export.py` does the work)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.commands.flags import Files, model_argument
from paddle_ft.errors import UserError
from paddle_ft.export import export_model
from paddle_ft.runtime import cpu_supports_bf16

FILES = Files(reads=("--check-precision",), writes=("--output",))


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--output", required=True, help="the export folder to create (new or empty)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier export in --output")
    parser.add_argument("--no-onnx", action="store_true", help="write no ONNX graph (the onnxruntime backend then "
                                                               "cannot serve the export)")
    parser.add_argument("--check-precision", metavar="DATA",
                        help="labelled texts (your dev file): time and score the export at fp32, bf16 (where the CPU "
                             "has it) and int8 on them, and recommend the fastest that keeps accuracy (about five "
                             "passes over DATA)")


def main(args) -> int:
    if args.check_precision and args.no_onnx:
        raise UserError("--check-precision measures int8 on the ONNX graph, which --no-onnx leaves out: give one")
    if args.check_precision and not Path(args.check_precision).is_file():
        raise UserError(f"--check-precision {args.check_precision}: no such file; give a labelled file (your dev set)")
    info = export_model(Path(args.model), Path(args.output), overwrite=args.overwrite, onnx=not args.no_onnx)
    onnx = f", ONNX graph {info.parity_max_abs_diff_onnx:.3g}" if info.onnx_file else \
        f" (no ONNX graph: {info.extra.get('onnx_skipped')})"
    print(f"exported to {args.output}: max abs logit difference vs dygraph {info.parity_max_abs_diff:.3g}{onnx}")
    if args.check_precision:
        from paddle_ft.inference.precision_check import check_precisions

        print("\n".join(check_precisions(Path(args.output), Path(args.check_precision)).lines()))
    elif info.onnx_file or cpu_supports_bf16():  # int8 runs on the ONNX graph, bf16 where the CPU has it
        reduced = " or ".join(name for name, runs in (("bf16", cpu_supports_bf16()), ("int8", info.onnx_file)) if runs)
        print(f"on this CPU the export can also run at {reduced}, ~2x fp32 on a 12-layer model: add --check-precision "
              "DEV_FILE to measure whether its answers hold and get a recommendation")
    return 0
