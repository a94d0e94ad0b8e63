"""Why a trained model answers as it does (the `explain` command's work): per explained label each token's attribution
(integrated gradients), the completeness error, and the nearest texts of a labelled file (by default the training
file the model's manifest records); optionally the same as a page of highlighted text."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from paddle_ft.analysis.explain import Explainer, Explanation
from paddle_ft.analysis.report import explanation_html, write_page
from paddle_ft.artifacts.bundle import check_trained_model_folder
from paddle_ft.artifacts.manifest import training_provenance
from paddle_ft.data.readers import Columns, format_of, read_examples
from paddle_ft.errors import UserError
from paddle_ft.log import elapsed, log
from paddle_ft.tokenization import check_texts


def explain_texts(model_dir: str, texts: list[str], text_pairs: list[str] | None = None, label: str | None = None,
                  steps: int = 50, neighbours: int = 3, data: str | None = None) -> list[Explanation]:
    """Token attributions of each text by `steps` integrated-gradients steps (for `label`, default the model's answer),
    each with its `neighbours` nearest labelled texts of `data` (default: the training file the manifest records)."""
    folder = Path(model_dir)
    check_trained_model_folder(folder, "whose gradients explaining takes")
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise UserError(f"--text-pair is given {len(text_pairs)} times for {len(texts)} --text: give one per --text")
    check_texts(texts, "--text #{}", first=1)  # before the model is loaded: predict's rule, predict's message
    if text_pairs is not None:
        check_texts(text_pairs, "--text-pair {}")
    explainer = Explainer.load(folder, steps=steps)
    if label is not None and label not in explainer.meta.labels:
        raise UserError(f"--label {label!r} is not one of the model's labels ({', '.join(explainer.meta.labels)})")
    if explainer.meta.takes_text_pair and text_pairs is None:
        raise UserError(f"{folder} was trained on text pairs: give a --text-pair for each --text")
    if text_pairs is not None and not explainer.meta.takes_text_pair:
        raise UserError(f"{folder} was trained on single texts: leave out --text-pair")
    if neighbours:
        _index(explainer, folder, data)
    explanations, started = [], time.perf_counter()
    for i, text in enumerate(texts):
        explanations += explainer.explain(text, text_pairs[i] if text_pairs else None, label, neighbours)
    seconds = time.perf_counter() - started
    # on stderr: stdout carries the explanations. At multilingual-e5-small's size 50 steps take ~2.4 s a text on 2
    # cores (docs/analysis.md), and 20 steps leave a completeness error of up to 0.07 against 0.004
    log(f"explained {len(texts)} text(s) in {elapsed(seconds)}: {seconds / len(texts):.2f} s a text at {steps} "
        "integrated-gradients steps", sys.stderr)
    return explanations


def write_explanations_page(path: str, model_dir: str, explanations: list[Explanation]) -> Path:
    """The explanations as highlighted text on one page."""
    return write_page(Path(path), f"Why {model_dir}", [explanation_html(e) for e in explanations])


def _index(explainer: Explainer, folder: Path, data: str | None) -> None:
    """The texts the nearest are searched among: `data`, else the training file the manifest records."""
    if data is None:
        recorded = training_provenance(folder).get("data", {}).get("train")
        if recorded is None or not Path(recorded["path"]).is_file():
            raise UserError(f"{folder} records no training file that is still there: give --data FILE (labelled "
                            "texts to find the nearest among), or --neighbours 0")
        data = recorded["path"]
    meta = explainer.meta
    columns = Columns.of(meta, meta.multi_label)
    examples, _ = read_examples(data, format_of(data, meta.format), columns, frozenset(meta.labels))
    log(f"explain: indexing {len(examples)} texts of {data} for the nearest", sys.stderr)  # stdout: JSON lines
    explainer.index(examples)
