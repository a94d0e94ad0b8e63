"""Prediction over texts or one file (the `predict` command's work without --ray): one JSON object per text, written
to a file or to standard output."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from paddle_ft.artifacts.export_folder import program_file, read_export_info
from paddle_ft.data.readers import read_texts
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Prediction, Predictor
from paddle_ft.io import atomic_file, check_output_file
from paddle_ft.log import LONG_INPUT, Progress, log
from paddle_ft.tokenization import check_texts

SKIP_OPTION = "--on-bad-row skip"  # what a bad row's error names as the way to leave bad rows out
CHUNK = 1024  # texts per predictor call on a long input, between progress updates


def predict(export_dir: str, texts: list[str] | None, text_pair: list[str] | None, input_path: str | None,
            output_path: str | None, options: PredictOptions, on_bad_row: str = "error") -> int:
    """Every text's answer (`texts`, else the texts of the file `input_path`) as a JSON line in `output_path`, else on
    standard output; the number of answers."""
    program_file(Path(export_dir))  # a wrong folder first, before reading any input
    lines = None
    if texts is None:
        if text_pair:
            raise UserError("--text-pair goes with --text; with --input, put the second texts in a text_pair column")
        meta = read_export_info(Path(export_dir)).model  # a table's columns are named as in training
        skipped = []
        texts, text_pair, lines = read_texts(Path(input_path), meta.text_column, meta.text_pair_column, on_bad_row,
                                             skipped, SKIP_OPTION, meta.header)
        say_skipped(input_path, skipped)
    if lines is None:  # a file's texts were checked as it was read, named by their line
        check_texts(texts, "--text #{}", first=1)
        if text_pair:
            check_texts(text_pair, "--text-pair #{}", first=1)
    if output_path:
        check_output_file(output_path, "--output-file", {"--input": input_path})
    # a short input is done in seconds: measuring the engines first would take longer than the answers
    predictor = Predictor(export_dir, replace(options, one_off=len(texts) <= LONG_INPUT))
    if options.top_k is not None and options.top_k > len(predictor.labels):  # said as the flag, not as top()'s k
        raise UserError(f"--top-k {options.top_k}: the model has {len(predictor.labels)} labels; give 1 to "
                        f"{len(predictor.labels)}")
    # without --output-file the answers go to standard output, and the progress to standard error, apart from them
    results = _predicted(predictor, texts, text_pair or None, None if output_path else sys.stderr)
    with atomic_file(output_path) if output_path else contextlib.nullcontext(sys.stdout) as out:
        for i, result in enumerate(results):  # to its end: the last chunk's progress line comes after its answers
            answer = record(texts[i], text_pair[i] if text_pair else None, lines[i] if lines else None, result,
                            options.top_k)
            out.write(json.dumps(answer, ensure_ascii=False) + "\n")
    return len(texts)


def say_skipped(path, skipped: list[tuple[int, str]]) -> None:
    """--on-bad-row skip: the rows left out, on standard error (standard output may carry the answers)."""
    if skipped:
        shown = "; ".join(f"line {line}: {reason}" for line, reason in skipped[:5])
        log(f"predict: left out {len(skipped)} bad rows of {path} ({shown}{'; ...' if len(skipped) > 5 else ''})",
            sys.stderr)


def record(text: str, text_pair: str | None, line: int | None, result: Prediction, top_k: int | None = None) -> dict:
    """One output row: the text (and its pair, its line in the input file), then the answer as every interface
    gives it (`Prediction.as_dict`)."""
    return {"text": text, **({"text_pair": text_pair} if text_pair is not None else {}),
            **({"line": line} if line is not None else {}), **result.as_dict(top_k)}


def _predicted(predictor: Predictor, texts: list[str], text_pair: list[str] | None,
               progress_to=None) -> Iterator[Prediction]:
    """Every text's prediction, in order; a long input in chunks, with progress, each chunk's answers written before
    the next is scored (a model of 20,000 labels holds 20,000 probabilities per text). The answers are the texts'
    own: a text's prediction does not depend on the others in its batch."""
    if len(texts) <= LONG_INPUT:
        yield from predictor.predict(texts, text_pair=text_pair)  # as the predictor's options say
        return
    progress = Progress(len(texts), "predict", file=progress_to)
    for start in range(0, len(texts), CHUNK):
        pairs = text_pair[start:start + CHUNK] if text_pair else None
        yield from predictor.predict(texts[start:start + CHUNK], text_pair=pairs)
        progress.update(min(CHUNK, len(texts) - start))
    progress.close()
