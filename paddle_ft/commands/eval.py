"""`eval`: score a trained model folder on a labelled file (workflows.evaluation); the metrics as one JSON object on
standard output, the misclassified rows to a file."""
from __future__ import annotations

import json

from paddle_ft.arguments import positive_int
from paddle_ft.commands.flags import model_argument


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--data", required=True, help="labelled TSV / CSV / JSONL file")
    parser.add_argument("--errors", help="where to write misclassified rows (default: beside the model)")
    parser.add_argument("--batch-size", type=positive_int, default=64)


def main(args) -> int:
    from paddle_ft.workflows.evaluation import evaluate_model

    print(json.dumps(evaluate_model(args.model, args.data, args.errors, args.batch_size), ensure_ascii=False,
                     indent=2))
    return 0
