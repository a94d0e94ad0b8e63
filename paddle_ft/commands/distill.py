"""`distill`: a smaller student trained on a teacher's answers (workflows.distillation)."""
from __future__ import annotations

from paddle_ft.commands.flags import TRAINING_DATA, Files, config_arguments

FILES = Files(reads=TRAINING_DATA, writes=("output_dir",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/distill-demo.yaml")
    parser.add_argument("--teacher", help="the teacher's model folder (OUT/best); sets distill.teacher")


def main(args) -> int:
    from paddle_ft.workflows.distillation import distill

    distill(args.config, args.override, args.teacher)
    return 0
