"""`explain`: why a trained model answers as it does (workflows.explanation): one JSON object per explained label on
standard output; `--html FILE` writes the same as highlighted text."""
from __future__ import annotations

import json
import sys

from paddle_ft.arguments import non_negative_int, positive_int
from paddle_ft.commands.flags import Files, model_argument, overwrite_argument
from paddle_ft.io import check_new_files, check_output_file
from paddle_ft.log import log

FILES = Files(reads=("--data",), writes=("--html",))


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--text", action="append", required=True, help="a text to explain; repeatable")
    parser.add_argument("--text-pair", action="append", help="the second text of a --text, in the same order, for a "
                                                             "model trained on text pairs; repeatable")
    parser.add_argument("--label", help="the label to explain (default: the model's answer; each label of a "
                                        "multi-label answer)")
    parser.add_argument("--steps", type=positive_int, default=50, help="integrated-gradients steps (more: a smaller "
                                                                       "completeness error, slower; default 50)")
    parser.add_argument("--neighbours", type=non_negative_int, default=3,
                        help="nearest labelled texts to show (0: none; default 3)")
    parser.add_argument("--data", help="labelled TSV / CSV / JSONL file to find the nearest texts in (default: the "
                                       "training file the model's manifest records)")
    parser.add_argument("--html", help="also write the explanations as highlighted text to this page")
    overwrite_argument(parser, "--html")


def main(args) -> int:
    from paddle_ft.workflows.explanation import explain_texts, write_explanations_page

    if args.html:  # before the work, not after it: a folder, or the file it would replace, is refused
        check_output_file(args.html, "--html", {"--data": args.data})
        check_new_files({"--html": args.html}, args.overwrite)
    explanations = explain_texts(args.model, args.text, args.text_pair, args.label, args.steps, args.neighbours,
                                 args.data)
    for explanation in explanations:
        print(json.dumps(explanation.as_dict(), ensure_ascii=False))
    if args.html:
        log(f"wrote {write_explanations_page(args.html, args.model, explanations)}", sys.stderr)
    return 0
