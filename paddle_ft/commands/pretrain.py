"""`pretrain`: masked-LM or ELECTRA pretraining of an encoder on unlabeled text (workflows.pretraining)."""
from __future__ import annotations

from paddle_ft.commands.flags import Files, config_arguments

FILES = Files(reads=("pretrain.corpus",), writes=("output_dir",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/pretrain-demo.yaml")


def main(args) -> int:
    from paddle_ft.workflows.pretraining import pretrain

    pretrain(args.config, args.override)
    return 0
