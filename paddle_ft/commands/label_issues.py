"""`label-issues`: the rows of train and dev that are probably mislabelled (workflows.label_issues)."""
from __future__ import annotations

from paddle_ft.analysis.label_issues import METHODS
from paddle_ft.arguments import positive_int
from paddle_ft.commands.flags import TRAINING_DATA, Files, config_arguments
from paddle_ft.log import log

FILES = Files(reads=TRAINING_DATA, writes=("--output",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/demo.yaml")
    parser.add_argument("--folds", type=positive_int, default=5, help="number of folds (default 5)")
    parser.add_argument("--output", required=True, help="the folder for the folds, the table, the page and the review "
                                                        "file (a rerun into it resumes)")
    parser.add_argument("--method", choices=METHODS, default="auto",
                        help="how each row gets a model that did not train on it: fine-tune (K training runs), "
                             "embeddings (the encoder frozen, a logistic regression per fold: minutes where K "
                             "fine-tunings of a large encoder take hours), auto (embeddings for a large encoder; "
                             "the default)")
    parser.add_argument("--prune", action="store_true", help="also train with every row and without the flagged ones, "
                                                             "and compare them on test")
    parser.add_argument("--fold-reports", action="store_true",
                        help="also write each fold's report.html (skipped by default: minutes each at a real "
                             "encoder's size)")
    parser.add_argument("--restart", action="store_true", help="delete what an earlier label-issues left in --output "
                                                               "and start afresh")


def main(args) -> int:
    from paddle_ft.data.corrections import DECISION
    from paddle_ft.workflows.label_issues import Search, find_issues

    found = find_issues(args.config, args.override, Search(args.folds, args.output, args.method, args.prune,
                                                           args.restart, args.fold_reports))
    log(f"label-issues: {found.flagged} of {found.rows} rows ({found.flagged / found.rows:.1%}) are probably "
        f"mislabelled (out-of-fold probabilities by {found.method}); wrote {found.table}, {found.page} and "
        f"{found.review} (fill its {DECISION} column, then train "
        f"with -o data.corrections={found.review})")
    return 0
