"""`import-annotations`: a Label Studio or doccano export as rows train reads, or a label-issues review answered
there as a corrections file for data.corrections (workflows.annotation)."""
from __future__ import annotations

from paddle_ft.commands.flags import Files, overwrite_argument, renamed
from paddle_ft.data.annotation import TOOLS
from paddle_ft.io import check_new_files

FILES = Files(reads=("file",), writes=("--output-file", "--append"))


def add_arguments(parser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="the tool's export: Label Studio JSON, JSON-MIN, CSV or TSV; doccano JSONL or its ZIP")
    parser.add_argument("--from", dest="tool", required=True, choices=TOOLS, help="the annotation tool")
    written = parser.add_mutually_exclusive_group(required=True)
    written.add_argument("--output-file", metavar="FILE", help="the .tsv/.csv/.jsonl file to write")
    overwrite_argument(parser, "--output-file")
    written.add_argument("--append", metavar="FILE", help="a training file (.tsv/.csv/.jsonl) to add the labelled "
                                                          "rows to, in its own columns (rows it holds already, same "
                                                          "text and label, are left out)")
    renamed(parser, "--output", "--output-file", "FILE")
    parser.add_argument("--from-name", help="Label Studio: the control tag whose answers are the labels (needed "
                                            "when a project has several)")
    parser.add_argument("--text-column", default="text", help="the output's text column (default: text)")
    parser.add_argument("--label-column", default="label", help="the output's label column (default: label)")


def main(args) -> int:
    from paddle_ft.workflows.annotation import import_annotations

    check_new_files({"--output-file": args.output_file}, args.overwrite)
    import_annotations(args.tool, args.file, args.output_file or args.append, args.from_name, args.text_column,
                       args.label_column, append=args.append is not None)
    return 0
