"""`init`: a training config written from your own labelled files (workflows.init says what it decides and why).

    python -m paddle_ft init --train reviews.csv [--dev dev.csv] [--backbone DIR] --output-file my.yaml
    python -m paddle_ft init --labels labels.tsv --backbone DIR [--test test.csv] --output-file my.yaml
"""
from __future__ import annotations

from paddle_ft.arguments import positive_float
from paddle_ft.commands.flags import Files, output_file_argument

FILES = Files(reads=("--train", "--dev", "--test", "--labels"), writes=("--output-file",))


def add_arguments(parser) -> None:
    parser.add_argument("--train", help="the labelled training file (.tsv, .csv or .jsonl, a header row)")
    parser.add_argument("--labels", metavar="FILE", help="a label name, a tab and a short description per line: "
                                                         "zero-shot without --train, the prototypes' start with it")
    parser.add_argument("--dev", help="a labelled file to pick the best model on (recommended)")
    parser.add_argument("--test", help="a labelled file scored once, at the end")
    parser.add_argument("--backbone", help="a pretrained model: a PaddleNLP name or a local PaddleNLP / Hugging Face "
                                           "folder (default: a small encoder trained from scratch)")
    output_file_argument(parser, "the config to write, e.g. my.yaml (never overwritten)")
    decided = parser.add_argument_group("overrule what init reads from the training file")
    decided.add_argument("--text-column", help="the column (or JSONL key) of the text")
    decided.add_argument("--text-pair-column", help="the column of a second text (the model classifies pairs)")
    decided.add_argument("--label-column", help="the column of the label (or label set)")
    decided.add_argument("--task", choices=("single_label", "multi_label"),
                         help="one label per row, or a set of labels per row")
    decided.add_argument("--label-delimiter", help="multi-label: what separates a row's label names (implies "
                                                   "--task multi_label)")
    decided.add_argument("--recipe", choices=("fine_tune", "few_shot"),
                         help="how to train (default: few_shot when a class has at most 32 rows and the backbone is "
                              "pretrained, else fine_tune)")
    decided.add_argument("--no-header", action="store_true", help="TSV/CSV files without a header row: every row "
                                                                  "is data, the columns are named 1, 2, ...")
    planned = parser.add_argument_group("with --backbone")
    planned.add_argument("--budget", type=positive_float, metavar="MINUTES",
                         help="fit the recipe into this many minutes here, as timed (fewer epochs, or part of one)")
    planned.add_argument("--no-trim", action="store_true",
                         help="keep a large SentencePiece vocabulary whole (by default init trims it to the pieces "
                              "your texts use when they are 1,000 or more)")
    planned.add_argument("--no-forecast", action="store_true",
                         help="do not time a few training steps here (which says the minutes per epoch and the peak "
                              "memory)")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set a key of the written config (dotted path, YAML value); repeatable")


def main(args) -> int:
    from paddle_ft.data.sniff import Choices
    from paddle_ft.workflows.init import InitRequest, write_recipe

    given = Choices(args.text_column, args.text_pair_column, args.label_column, args.task, args.label_delimiter,
                    header=not args.no_header)
    write_recipe(InitRequest(args.output_file, args.train, args.dev, args.test, args.labels, args.backbone,
                             args.recipe, given, tuple(args.override), not args.no_forecast, args.budget,
                             not args.no_trim))
    return 0
