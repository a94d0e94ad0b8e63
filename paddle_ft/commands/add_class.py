"""`add-class`: a prototype-head model with one class more, without retraining (workflows.classes)."""
from __future__ import annotations

from paddle_ft.arguments import share
from paddle_ft.commands.flags import Files

FILES = Files(reads=("--examples", "--reference"), writes=("--output",))


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="the OUT/best folder of a model trained with model.head: "
                                                       "prototype")
    parser.add_argument("--label", required=True, help="the new class's name")
    parser.add_argument("--examples", metavar="FILE", help="texts of the new class: .txt (one per line) or "
                                                           ".tsv/.csv/.jsonl (the model's text column)")
    parser.add_argument("--description", help="a short description of the class (as zero-shot's label descriptions)")
    parser.add_argument("--reference", metavar="FILE",
                        help="labelled rows of the model's classes that set how sure the new class must be (default: "
                             "the model's dev file, else its train file, as its manifest names them)")
    parser.add_argument("--max-changed", type=share, default=0.005,
                        help="the largest share of the reference rows whose answer may become the new class "
                             "(default 0.005)")
    parser.add_argument("--output", required=True, help="the new model folder to create (OUT2/best)")


def main(args) -> int:
    from paddle_ft.workflows.classes import add_class

    add_class(args.model, args.label, args.examples, args.description, args.output, args.reference, args.max_changed)
    return 0
