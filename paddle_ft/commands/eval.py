"""`eval`: score a trained model folder on a labelled file (workflows.evaluation); the metrics as one JSON object on
standard output, the misclassified rows to a file."""
from __future__ import annotations

import json
import sys

from paddle_ft.arguments import positive_int
from paddle_ft.commands.flags import Files, model_argument, overwrite_argument
from paddle_ft.config import METRICS
from paddle_ft.log import log

FILES = Files(reads=("--data",), writes=("--errors",))


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--data", required=True, help="labelled TSV / CSV / JSONL file")
    parser.add_argument("--errors", help="where to write misclassified rows (default: beside the model)")
    overwrite_argument(parser, "--errors")
    parser.add_argument("--batch-size", type=positive_int, default=64)


def main(args) -> int:
    from paddle_ft.workflows.evaluation import evaluate_model

    report = evaluate_model(args.model, args.data, args.errors, args.batch_size, args.overwrite)
    print(json.dumps(report, ensure_ascii=False, indent=2))
    log(summary_line(report), sys.stderr)  # the report is standard output's alone
    return 0


def summary_line(report: dict) -> str:
    """The report's headline in one line: its task's metrics (those of METRICS it holds), the texts scored and where
    the mistakes went."""
    scores = ", ".join(f"{name} {report[name]:.4f}" for name in METRICS if isinstance(report.get(name), float))
    return (f"eval: {scores} on {report['examples']} texts of {report['data']}; misclassified rows in "
            f"{report['misclassified_file']}")
