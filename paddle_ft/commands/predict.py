"""`predict`: classify texts with an exported folder; one JSON object per text."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from paddle_ft.data.readers import Columns, format_of, read_examples
from paddle_ft.errors import DataError, UserError
from paddle_ft.infer import Predictor, check_texts, program_file
from paddle_ft.io import check_output_file
from paddle_ft.meta import read_export_info


def run(model_dir: str, texts: list[str] | None, pairs: list[str] | None, input_path: str | None,
        output_path: str | None, batch_size: int, predictor_options: dict) -> int:
    program_file(Path(model_dir))  # a wrong folder first, before reading any input
    if texts is None:
        if pairs:
            raise UserError("--text-pair goes with --text; with --input, put the second texts in a text_pair column")
        texts, pairs = read_texts(Path(input_path), read_export_info(Path(model_dir)).model.takes_pairs)
    check_texts(texts, "--text {}")
    if output_path:
        check_output_file(output_path, "--output")
    predictor = Predictor(model_dir, **predictor_options)
    results = predictor.predict(texts, batch_size, pairs=pairs or None)
    out = Path(output_path).open("w", encoding="utf-8") if output_path else sys.stdout
    try:
        for i, (text, result) in enumerate(zip(texts, results)):
            record = {"text": text, **({"text_pair": pairs[i]} if pairs else {}), "label": result.label,
                      "score": round(result.score, 6)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        if output_path:
            out.close()
    return 0


def read_texts(path: Path, text_pairs: bool = False) -> tuple[list[str], list[str] | None]:
    """Texts of a .txt file (one per non-blank line) or of the `text` column of a .tsv/.csv/.jsonl file,
    and for a pair model the second texts of its `text_pair` column."""
    if path.suffix.lower() in (".tsv", ".csv", ".jsonl"):
        columns = Columns(text="text", text_pair="text_pair" if text_pairs else None, label=None)
        examples, _ = read_examples(path, format_of(path), columns)
        return [e.text for e in examples], [e.text_pair for e in examples] if text_pairs else None
    if text_pairs:
        raise DataError(str(path), None, "this model classifies text pairs: give a .tsv/.csv/.jsonl file with "
                                         "text and text_pair columns")
    if not path.is_file():
        raise DataError(str(path), None, "file not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(str(path), None, f"not UTF-8 (byte {exc.start}); re-save the file as UTF-8") from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise DataError(str(path), None, "no texts in the file")
    return texts, None
