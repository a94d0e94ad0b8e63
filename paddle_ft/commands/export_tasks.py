"""`export-tasks`: texts (or a label-issues review) with the model's answers as pre-annotations, as Label Studio or
doccano tasks (workflows.annotation)."""
from __future__ import annotations

from paddle_ft.arguments import positive_int
from paddle_ft.commands.flags import Files, model_argument, output_file_argument, overwrite_argument
from paddle_ft.data.annotation import TOOLS
from paddle_ft.io import check_new_files

FILES = Files(reads=("--input",), writes=("--output-file",))


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--input", required=True, metavar="FILE",
                        help="texts to label (.txt, or the model's text column of .tsv/.csv/.jsonl), or a "
                             "label-issues review file")
    parser.add_argument("--to", required=True, choices=TOOLS, help="the annotation tool")
    output_file_argument(parser, "the tasks file to write (Label Studio: a .json, with a .label_config.xml beside "
                                 "it; doccano: a .jsonl)")
    overwrite_argument(parser, "--output-file")
    parser.add_argument("--batch-size", type=positive_int, default=64)


def main(args) -> int:
    from paddle_ft.workflows.annotation import export_tasks

    check_new_files({"--output-file": args.output_file}, args.overwrite)
    export_tasks(args.model, args.input, args.to, args.output_file, args.batch_size)
    return 0
