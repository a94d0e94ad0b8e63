"""`convert`: a Hugging Face checkpoint folder as a PaddleNLP one (`paddle_ft/models/convert.py` does the work)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.commands.flags import Files
from paddle_ft.errors import UserError
from paddle_ft.io import new_output_folder
from paddle_ft.models.convert import convert_hf_folder, is_hf_folder

FILES = Files(writes=("--output",))


def add_arguments(parser) -> None:
    parser.add_argument("--from-hf", required=True, help="a Hugging Face folder: config.json, model.safetensors "
                                                         "or pytorch_model.bin, vocab.txt")
    parser.add_argument("--output", required=True, help="the PaddleNLP folder to create (model.backbone loads it)")


def main(args) -> int:
    source, output = Path(args.from_hf), Path(args.output)
    if not is_hf_folder(source):
        raise UserError(f"--from-hf {source} is not a Hugging Face checkpoint folder (config.json with "
                        "model.safetensors or pytorch_model.bin)")
    with new_output_folder(output, "--output", "convert into a new folder"):
        report = convert_hf_folder(source, output)
    print(f"converted {report['converted']} tensors of {source} into {output} (left out: "
          f"{', '.join(report['left_out']) or 'nothing'}); use it with -o model.backbone={output}")
    return 0
