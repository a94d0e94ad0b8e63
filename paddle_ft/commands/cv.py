"""`cv`: K-fold cross-validation of a config (workflows.cv); the table of every metric on standard output."""
from __future__ import annotations

from paddle_ft.arguments import positive_float, positive_int
from paddle_ft.commands.flags import TRAINING_DATA, Files, config_arguments
from paddle_ft.log import log

FILES = Files(reads=TRAINING_DATA, writes=("output_dir",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/demo.yaml")
    parser.add_argument("--folds", type=positive_int, default=5, help="number of folds (default 5)")
    parser.add_argument("--budget", type=positive_float, metavar="MINUTES",
                        help="time the folds here first and refuse them, in one line, where they would not end within "
                             "this many minutes")
    parser.add_argument("--restart", action="store_true", help="delete the folds an earlier cv left in OUTPUT_DIR and "
                                                               "start afresh (a rerun otherwise resumes them)")


def main(args) -> int:
    from paddle_ft.workflows.cv import cross_validate

    outcome = cross_validate(args.config, args.override, args.folds, args.restart, args.budget)
    print(outcome.table, end="")
    log(f"wrote {', '.join(map(str, outcome.files[:-1]))} and {outcome.files[-1]}")
    return 0
