"""A backbone folder with only the vocabulary pieces some texts use (the `trim-vocab` command's work; the trimming
itself is `models.trim`'s)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.config import ModelConfig
from paddle_ft.data.readers import read_texts
from paddle_ft.errors import UserError
from paddle_ft.io import new_output_folder
from paddle_ft.log import log
from paddle_ft.models.backbone import WEIGHT_FILES, check_folder, resolve
from paddle_ft.models.trim import TrimReport, trim_folder


def trim_vocabulary(backbone: str, data: list[str], output: str, keep_top: int = 5000, text_column: str = "text",
                    cache_dir: str | None = None) -> TrimReport:
    """A copy of the folder `backbone` in the new folder `output`, keeping the pieces the texts of `data` use and the
    `keep_top` most probable others (a PyTorch-pickle folder is read through its converted copy in `cache_dir`,
    default model.cache_dir's default)."""
    source = Path(backbone)
    if not source.is_dir():
        raise UserError(f"--backbone {backbone} is not a folder; give a local Hugging Face or PaddleNLP model folder")
    check_folder(source, f"--backbone {backbone}")  # a table config.json does not describe: left uncut, or cut wrong
    with new_output_folder(output, "--output", "trim into a new folder") as target:
        texts = [text for path in data for text in read_texts(Path(path), text_column)[0]]
        # a PyTorch-pickle Hugging Face folder is read through its converted copy; a safetensors one as it is
        folder = source if any((source / name).is_file() for name in WEIGHT_FILES) \
            else Path(resolve(str(source), cache_dir or ModelConfig().cache_dir, log))
        return trim_folder(folder, texts, target, keep_top)
