"""`predict`: classify texts with an exported folder; one JSON object per text."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from paddle_ft.data.readers import Columns, format_of, read_examples
from paddle_ft.errors import DataError
from paddle_ft.infer import Predictor, check_texts
from paddle_ft.io import check_output_file


def run(model_dir: str, texts: list[str] | None, input_path: str | None, output_path: str | None,
        batch_size: int, predictor_options: dict) -> int:
    if texts is None:
        texts = read_texts(Path(input_path))
    check_texts(texts, "--text {}")
    if output_path:
        check_output_file(output_path, "--output")
    predictor = Predictor(model_dir, **predictor_options)
    results = predictor.predict(texts, batch_size)
    out = Path(output_path).open("w", encoding="utf-8") if output_path else sys.stdout
    try:
        for text, result in zip(texts, results):
            record = {"text": text, "label": result["label"], "score": round(result["score"], 6)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        if output_path:
            out.close()
    return 0


def read_texts(path: Path) -> list[str]:
    """Texts of a .txt file (one per non-blank line) or of the `text` column of a .tsv/.csv/.jsonl file."""
    if path.suffix.lower() in (".tsv", ".csv", ".jsonl"):
        examples, _ = read_examples(path, format_of(path), Columns(text="text", label=None))
        return [e.text for e in examples]
    if not path.is_file():
        raise DataError(str(path), None, "file not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(str(path), None, f"not UTF-8 (byte {exc.start}); re-save the file as UTF-8") from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise DataError(str(path), None, "no texts in the file")
    return texts
