"""`sweep`: hyperparameter search with Optuna over a config (workflows.sweep); the trials ranked on standard
output."""
from __future__ import annotations

from paddle_ft.arguments import positive_float, positive_int
from paddle_ft.commands.flags import TRAINING_DATA, Files, config_arguments
from paddle_ft.log import log

FILES = Files(reads=(*TRAINING_DATA, "--space"), writes=("output_dir",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/demo.yaml")
    parser.add_argument("--space", required=True, help="the search space YAML (params, sampler, trials, pruner)")
    parser.add_argument("--trials", type=positive_int, help="trials in all (default: the space's)")
    parser.add_argument("--budget", type=positive_float, metavar="MINUTES",
                        help="start no trial that would not end within this many minutes (timed here: the first trial "
                             "by a few training steps, the next by the trials so far)")
    parser.add_argument("--storage", help="Optuna storage URL (default sqlite:///OUT/study.db; postgresql://... for "
                                          "several machines)")
    parser.add_argument("--restart", action="store_true", help="delete the study and trials an earlier sweep left "
                                                               "and start afresh (a rerun otherwise resumes them)")


def main(args) -> int:
    from paddle_ft.workflows.sweep import Limits, sweep

    outcome = sweep(args.config, args.override, args.space, args.storage, Limits(args.trials, args.budget),
                    args.restart)
    print(outcome.table)
    log(f"best: trial {outcome.best_trial}, dev {outcome.metric} {outcome.best_value:.4f}; wrote "
        f"{outcome.best_config} (train it with -o output_dir=...) and {outcome.files[0]}")
    return 0
