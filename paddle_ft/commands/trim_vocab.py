"""`trim-vocab`: a copy of a backbone keeping only the vocabulary pieces your texts use (workflows.trim_vocab)."""
from __future__ import annotations

from paddle_ft.arguments import non_negative_int
from paddle_ft.commands.flags import Files

FILES = Files(reads=("--data",), writes=("--output",))


def add_arguments(parser) -> None:
    parser.add_argument("--backbone", required=True, help="a Hugging Face or PaddleNLP folder with a tokenizer.json")
    parser.add_argument("--data", nargs="+", required=True, metavar="FILE",
                        help="the texts the model will read: .tsv / .csv / .jsonl (their text column) or .txt files")
    parser.add_argument("--output", required=True, help="the trimmed folder to create (model.backbone loads it)")
    # 5,000: the everyday characters and words an unseen text most likely needs, ~2% of e5-small's table
    parser.add_argument("--keep-top", type=non_negative_int, default=5000,
                        help="the most probable pieces kept besides the texts' own (default 5000)")
    parser.add_argument("--text-column", default="text", help="the text column of the data files (default: text)")


def main(args) -> int:
    from paddle_ft.workflows.trim_vocab import trim_vocabulary

    report = trim_vocabulary(args.backbone, args.data, args.output, args.keep_top, args.text_column)
    print(f"{report.describe()} -> {args.output}; fine-tune it with -o model.backbone={args.output}")
    return 0
