"""`pretrain`: masked-LM or ELECTRA pretraining of an encoder on unlabeled text (workflows.pretraining)."""
from __future__ import annotations

from paddle_ft.commands.flags import config_arguments


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/pretrain-demo.yaml")


def main(args) -> int:
    from paddle_ft.workflows.pretraining import pretrain

    pretrain(args.config, args.override)
    return 0
