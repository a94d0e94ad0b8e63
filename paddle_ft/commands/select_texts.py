"""`select-texts`: the unlabelled texts worth labelling next (active learning), as export-tasks writes them
(workflows.annotation)."""
from __future__ import annotations

from paddle_ft.analysis.selection import STRATEGIES
from paddle_ft.arguments import non_negative_int, positive_int
from paddle_ft.commands.flags import Files, model_argument, output_file_argument, overwrite_argument, renamed
from paddle_ft.data.annotation import TOOLS
from paddle_ft.io import check_new_files

FILES = Files(reads=("--pool", "--labelled"), writes=("--output-file",))


def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--pool", required=True, metavar="FILE", help="unlabelled texts (as export-tasks' --input)")
    parser.add_argument("--count", required=True, type=positive_int, help="how many texts to select")
    # --budget is minutes in init, cv and sweep: one flag, one meaning
    renamed(parser, "--budget", "--count", "N")
    parser.add_argument("--strategy", choices=STRATEGIES, default="diverse",
                        help="uncertainty (entropy), margin (top-2 gap), diverse (uncertain and spread over the "
                             "embedding space; default), mixed (half uncertainty, half random) or random")
    parser.add_argument("--to", required=True, choices=TOOLS, help="the annotation tool")
    output_file_argument(parser, "the tasks file to write, as export-tasks")
    overwrite_argument(parser, "--output-file")
    parser.add_argument("--labelled", metavar="FILE", help="texts labelled already, left out of the pool and counted "
                        "as covered by diverse (default: the training file the model's manifest records)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="the seed of random and mixed (default 0)")
    parser.add_argument("--batch-size", type=positive_int, default=64)


def main(args) -> int:
    from paddle_ft.workflows.annotation import Selection, select_texts

    check_new_files({"--output-file": args.output_file}, args.overwrite)
    select_texts(args.model, args.pool, args.to, args.output_file,
                 Selection(args.count, args.strategy, args.seed, args.batch_size), args.labelled)
    return 0
