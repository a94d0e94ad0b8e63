"""`quantize`: an export as int8 for ONNX Runtime, refused unless its accuracy holds on labelled texts
(`paddle_ft/inference/quantize.py` does the work)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.arguments import non_negative_float, share
from paddle_ft.commands.flags import Files, renamed
from paddle_ft.inference.quantize import quantize_export

FILES = Files(reads=("--data", "--calibration"), writes=("--output",))


def add_arguments(parser) -> None:
    parser.add_argument("--export", required=True, help="an export folder with model.onnx (tools/export.py)")
    renamed(parser, "--model", "--export", "DIR")
    parser.add_argument("--data", required=True, help="labelled TSV / CSV / JSONL file for the accuracy check")
    parser.add_argument("--output", required=True, help="the int8 export folder to create (new or empty)")
    parser.add_argument("--method", choices=("dynamic", "static"), default="dynamic",
                        help="dynamic: activation ranges per batch at run time (default); static: fixed from "
                             "--calibration texts")
    parser.add_argument("--calibration", help="texts (.txt, or a text column) to fix activation ranges, for "
                                              "--method static")
    parser.add_argument("--max-drop", type=non_negative_float, default=1.0,
                        help="accuracy points the int8 model may lose on --data (default 1)")
    parser.add_argument("--min-agreement", type=share, default=0.99,
                        help="the share of --data texts on which int8 must give the fp32 answer (default 0.99)")


def main(args) -> int:
    check = quantize_export(Path(args.export), Path(args.data), Path(args.output), args.method,
                            Path(args.calibration) if args.calibration else None, args.max_drop, args.min_agreement)
    print(f"quantized to {args.output}: accuracy {check['accuracy_int8']:.4f} (fp32 {check['accuracy_fp32']:.4f}), "
          f"the same answer on {check['agreement']:.2%} of {check['texts']} texts")
    return 0
