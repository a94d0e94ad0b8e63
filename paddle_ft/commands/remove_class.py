"""`remove-class`: a prototype-head model without one of its classes (workflows.classes)."""
from __future__ import annotations

from paddle_ft.commands.flags import Files

FILES = Files(writes=("--output",))


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="the OUT/best folder of a model trained with model.head: "
                                                       "prototype")
    parser.add_argument("--label", required=True, help="the class to remove")
    parser.add_argument("--output", required=True, help="the new model folder to create")


def main(args) -> int:
    from paddle_ft.workflows.classes import remove_class

    remove_class(args.model, args.label, args.output)
    return 0
