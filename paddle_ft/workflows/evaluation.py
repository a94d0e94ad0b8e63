"""Scoring a trained model folder on a labelled file (the `eval` command's work); the rows it got wrong to a file."""
from __future__ import annotations

import sys
from pathlib import Path

from paddle_ft.analysis.report import write_per_class
from paddle_ft.analysis.scoring import answers
from paddle_ft.artifacts.bundle import load_bundle
from paddle_ft.data.features import tokenize
from paddle_ft.data.readers import Columns, format_of, one_line, read_examples
from paddle_ft.engine.evaluate import evaluate
from paddle_ft.engine.metrics import MANY_CLASSES, per_class_extremes
from paddle_ft.io import atomic_file, check_new_files, check_output_file
from paddle_ft.log import LONG_INPUT, Progress
from paddle_ft.tokenization import fastest


def evaluate_model(model_dir: str, data_path: str, errors_path: str | None = None, batch_size: int = 64,
                   overwrite: bool = False) -> dict:
    """The model's metrics on `data_path` (every class's beside them, or of many classes the best and worst and a
    file of all), its misclassified rows written to `errors_path` (default: beside the model, replaced at each eval;
    a path given that exists, or the per-class table named after it, is replaced only with `overwrite`)."""
    model_dir = Path(model_dir)
    errors = Path(errors_path) if errors_path else model_dir.parent / f"misclassified-{Path(data_path).stem}.tsv"
    bundle = load_bundle(model_dir)
    meta, label_map, tokenizer = bundle.meta, bundle.label_map, fastest(bundle.tokenizer)
    table = _per_class_file(errors, meta.multi_label)
    written = {"--errors": errors, **({"the per-class table (named after --errors)": table}
                                      if len(label_map) > MANY_CLASSES else {})}
    for option, path in written.items():
        check_output_file(path, option, {"--data": data_path})
    check_new_files(written, overwrite or errors_path is None)  # the default, beside the model, is paddle_ft's own
    examples, _ = read_examples(data_path, format_of(data_path, meta.format), Columns.of(meta, meta.multi_label),
                                frozenset(label_map.names))
    # the report is printed on standard output: the progress goes to standard error, apart from it
    features = tokenize(examples, tokenizer, meta.max_length, label_map, meta.truncation_rule)
    progress = Progress(len(features), "eval", file=sys.stderr) if len(features) > LONG_INPUT else None
    report, probs = evaluate(bundle.model, features, batch_size, tokenizer.pad_token_id, label_map.names,
                             thresholds=meta.label_thresholds if meta.multi_label else None,
                             temperature=meta.temperature, on_batch=progress and progress.update,
                             abstain_below=meta.abstain_below, hierarchy=meta.hierarchy)
    if progress:
        progress.close()
    with atomic_file(errors) as out:
        out.write("line\ttext\tgold\tpredicted\tscore\n")
        answered = answers(probs, label_map.names, meta.label_thresholds if meta.multi_label else None)
        for example, (predicted, score) in zip(examples, answered):
            gold = example.label_names
            if set(predicted) != set(gold):
                text = example.text if example.text_pair is None else f"{example.text} ||| {example.text_pair}"
                text = one_line(text)  # a tab or newline inside a CSV/JSONL text would break the TSV
                out.write(f"{example.line}\t{text}\t{meta.label_delimiter.join(gold)}\t"
                          f"{meta.label_delimiter.join(predicted)}\t{score:.4f}\n")
    return {"data": str(data_path), **_readable(report, table), "misclassified_file": str(errors)}


def _per_class_file(errors: Path, multi_label: bool) -> Path:
    """Where every class's scores go, of a model of many: beside the misclassified file."""
    key = "per_label" if multi_label else "per_class"
    return errors.with_name(f"{key}-{errors.stem.removeprefix('misclassified-')}.tsv")


def _readable(report: dict, per_class_file: Path) -> dict:
    """Of many classes the report printed names the best and worst of them; every class goes to `per_class_file`
    (a multi-label model's thresholds too, as a column: 5,000 of them printed were most of the report)."""
    key = "per_class" if "per_class" in report else "per_label"
    table = report.get(key, {})
    if len(table) <= MANY_CLASSES:
        return report
    thresholds = report.get("thresholds", {})
    table = {name: {**row, **({"threshold": thresholds[name]} if name in thresholds else {})}
             for name, row in table.items()}
    best, worst = per_class_extremes(table)
    path = write_per_class(per_class_file, table)
    shown = {f"{key}_best": {n: table[n] for n in best}, f"{key}_worst": {n: table[n] for n in worst}}
    return {**{k: v for k, v in report.items() if k not in (key, "thresholds")}, **shown, f"{key}_file": str(path)}
