"""`trim-vocab`: a backbone folder with only the vocabulary pieces some texts use (`paddle_ft.models.trim`)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.arguments import non_negative_int
from paddle_ft.models.backbone import WEIGHT_FILES, resolve
from paddle_ft.data.readers import read_texts
from paddle_ft.errors import UserError
from paddle_ft.io import check_output_folder
from paddle_ft.log import log
from paddle_ft.models.trim import trim_folder


def run(backbone: str, data: list[str], output: str, keep_top: int, text_column: str, cache_dir: str) -> int:
    source = Path(backbone)
    if not source.is_dir():
        raise UserError(f"--backbone {backbone} is not a folder; give a local Hugging Face or PaddleNLP model folder")
    target = check_output_folder(output, "--output")
    if target.exists() and any(target.iterdir()):
        raise UserError(f"--output {target} already exists and is not empty; trim into a new folder")
    texts = [text for path in data for text in read_texts(Path(path), text_column)[0]]
    # a PyTorch-pickle Hugging Face folder is read through its converted copy; a safetensors one as it is
    folder = source if any((source / name).is_file() for name in WEIGHT_FILES) \
        else Path(resolve(str(source), cache_dir, log))
    report = trim_folder(folder, texts, target, keep_top)
    print(f"{report.describe()} -> {target}; fine-tune it with -o model.backbone={target}")
    return 0


# the command line: `python -m paddle_ft trim-vocab` (registered in paddle_ft/cli.py)
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
    from paddle_ft.config import ModelConfig

    return run(args.backbone, args.data, args.output, args.keep_top, args.text_column, ModelConfig().cache_dir)
