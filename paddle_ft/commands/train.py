"""`train`: fine-tune a classifier as a YAML config says (workflows.training does the work)."""
from __future__ import annotations

from paddle_ft.commands.flags import TRAINING_DATA, Files, config_arguments

FILES = Files(reads=TRAINING_DATA, writes=("output_dir",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/demo.yaml")


def main(args) -> int:
    from paddle_ft.workflows.training import train

    train(args.config, args.override)
    return 0
