"""`explain`: why a trained model answers as it does, one JSON object per explained label: each token's attribution
(integrated gradients), the completeness error, and the nearest texts of a labelled file (by default the training
file the model's manifest records); `--html FILE` writes the same as highlighted text."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from paddle_ft.analysis.explain import Explainer
from paddle_ft.analysis.report import explanation_html, write_page
from paddle_ft.arguments import non_negative_int, positive_int
from paddle_ft.artifacts.bundle import check_trained_model_folder
from paddle_ft.artifacts.manifest import training_provenance
from paddle_ft.commands.flags import model_argument
from paddle_ft.data.readers import Columns, format_of, read_examples
from paddle_ft.errors import UserError
from paddle_ft.io import check_output_file
from paddle_ft.log import log
from paddle_ft.tokenization import check_texts


def main(args) -> int:
    """Token attributions (and the nearest labelled texts) of each --text, a JSON line each; --html a page of them."""
    texts, text_pairs, label, data, html_path = args.text, args.text_pair, args.label, args.data, args.html
    folder = Path(args.model)
    check_trained_model_folder(folder, "whose gradients explaining takes")
    if html_path:  # before the work, not after it: a folder, or the file it would replace, is refused
        check_output_file(html_path, "--html", {"--data": data})
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise UserError(f"--text-pair is given {len(text_pairs)} times for {len(texts)} --text: give one per --text")
    check_texts(texts, "--text {}")  # before the model is loaded: predict's rule, predict's message
    if text_pairs is not None:
        check_texts(text_pairs, "--text-pair {}")
    explainer = Explainer.load(folder, steps=args.steps)
    if label is not None and label not in explainer.meta.labels:
        raise UserError(f"--label {label!r} is not one of the model's labels ({', '.join(explainer.meta.labels)})")
    if explainer.meta.takes_text_pair and text_pairs is None:
        raise UserError(f"{folder} was trained on text pairs: give a --text-pair for each --text")
    if text_pairs is not None and not explainer.meta.takes_text_pair:
        raise UserError(f"{folder} was trained on single texts: leave out --text-pair")
    if args.neighbours:
        _index(explainer, folder, data)
    explanations = []
    for i, text in enumerate(texts):
        pair = text_pairs[i] if text_pairs else None
        explanations += explainer.explain(text, pair, label, args.neighbours)
    for explanation in explanations:
        print(json.dumps(explanation.as_dict(), ensure_ascii=False))
    if html_path:
        page = write_page(Path(html_path), f"Why {folder}", [explanation_html(e) for e in explanations])
        log(f"wrote {page}", sys.stderr)
    return 0


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


# the command line: `python -m paddle_ft explain` (registered in paddle_ft/cli.py)
def add_arguments(parser) -> None:
    model_argument(parser)
    parser.add_argument("--text", action="append", required=True, help="a text to explain; repeatable")
    parser.add_argument("--text-pair", action="append", help="the second text of a --text, in the same order, for a "
                                                             "model trained on text pairs; repeatable")
    parser.add_argument("--label", help="the label to explain (default: the model's answer; each label of a "
                                        "multi-label answer)")
    parser.add_argument("--steps", type=positive_int, default=50, help="integrated-gradients steps (more: a smaller "
                                                                       "completeness error, slower; default 50)")
    parser.add_argument("--neighbours", type=non_negative_int, default=3,
                        help="nearest labelled texts to show (0: none; default 3)")
    parser.add_argument("--data", help="labelled TSV / CSV / JSONL file to find the nearest texts in (default: the "
                                       "training file the model's manifest records)")
    parser.add_argument("--html", help="also write the explanations as highlighted text to this page")
