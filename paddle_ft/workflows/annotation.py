"""Round trips with annotation tools (the work of three commands): `export-tasks` writes texts with the model's
answers as pre-annotations for Label Studio or doccano, `select-texts` the texts worth labelling next in the same
form, and `import-annotations` reads what people labelled back into a file `train` reads (or, for a `label-issues`
review, into the corrections file `data.corrections` reads)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.analysis.scoring import Scores, answers, score_texts
from paddle_ft.analysis.selection import select as rank
from paddle_ft.artifacts.bundle import Bundle, check_trained_model_folder, load_bundle
from paddle_ft.artifacts.manifest import training_provenance
from paddle_ft.data.annotation import Labelled, LabelSpace, Task, check_tasks_output, write_tasks
from paddle_ft.data.annotation_exports import read_annotations
from paddle_ft.data.corrections import DECISION, FILE, LINE, SUGGESTED
from paddle_ft.data.readers import (Columns, Example, format_of, one_line, read_examples, read_records, read_texts,
                                    write_records)
from paddle_ft.errors import DataError, UserError
from paddle_ft.io import atomic_file, atomic_path, check_output_file
from paddle_ft.log import LONG_INPUT, Progress, log
from paddle_ft.tokenization import NO_TOKEN, readable


@dataclass(frozen=True)
class Selection:
    """Which texts `select_texts` picks."""

    count: int
    """How many."""
    strategy: str = "diverse"
    """One of analysis.selection.STRATEGIES."""
    seed: int = 0
    """random's seed."""
    batch_size: int = 64


def export_tasks(model_dir: str, input_path: str, tool: str, output: str, batch_size: int = 64) -> list[Path]:
    """The texts of `input_path` (or a label-issues review's rows) as `tool`'s tasks in `output`, the model's answers
    as pre-annotations; the files written."""
    bundle = _model(model_dir)
    check_output_file(output, "--output-file", {"--input": input_path})
    check_tasks_output(Path(output), tool)  # before minutes of scoring, not after
    examples, fields = _texts_to_label(Path(input_path), bundle)
    scores = _scored(bundle, examples, batch_size, with_vectors=False)
    tasks = _tasks(bundle, examples, scores, fields)
    written = write_tasks(Path(output), tool, tasks, LabelSpace.of_model(bundle.meta))
    log(f"wrote {len(tasks)} tasks for {tool} with {model_dir}'s answers as pre-annotations: "
        f"{', '.join(map(str, written))}{_how_to_load(tool, written)}")
    return written


def select_texts(model_dir: str, pool_path: str, tool: str, output: str, selection: Selection,
                 labelled_path: str | None = None) -> list[Path]:
    """The `selection.count` texts of `pool_path` most worth labelling next, by `selection.strategy`, as `tool`'s
    tasks in `output` (texts of `labelled_path`, by default the model's training file, left out); the files written."""
    count, strategy, batch_size = selection.count, selection.strategy, selection.batch_size
    bundle = _model(model_dir)
    check_output_file(output, "--output-file", {"--pool": pool_path})
    check_tasks_output(Path(output), tool)
    examples, fields = _texts_to_label(Path(pool_path), bundle)
    labelled = _labelled_texts(Path(model_dir), bundle, labelled_path)
    keep = [i for i, e in enumerate(examples) if (e.text, e.text_pair) not in labelled]
    if len(keep) < len(examples):
        log(f"select: {len(examples) - len(keep)} texts of {pool_path} are labelled already; left out")
    if not keep:
        raise UserError(f"--pool {pool_path}: every text is labelled already; nothing is left to select")
    examples, fields = [examples[i] for i in keep], [fields[i] for i in keep]
    scores = _scored(bundle, examples, batch_size, with_vectors=strategy == "diverse")
    covered = None
    if strategy == "diverse" and labelled:
        covered = _scored(bundle, [Example(t, p, None, 0) for t, p in sorted(labelled, key=str)], batch_size,
                          with_vectors=True).vectors
    thresholds = bundle.meta.label_thresholds if bundle.meta.multi_label else None
    order, uncertain = rank(strategy, scores.probabilities, count, thresholds, scores.vectors, covered,
                            selection.seed)
    chosen = Scores(scores.probabilities[order], None)
    tasks = _tasks(bundle, [examples[i] for i in order], chosen,
                   [{**fields[i], "rank": r, "strategy": strategy, "uncertainty": round(float(u), 6)}
                    for r, (i, u) in enumerate(zip(order, uncertain), start=1)])
    written = write_tasks(Path(output), tool, tasks, LabelSpace.of_model(bundle.meta))
    log(f"selected {len(tasks)} of {len(examples)} texts of {pool_path} by {strategy}: "
        f"{', '.join(map(str, written))}{_how_to_load(tool, written)}")
    return written


def import_annotations(tool: str, path: str, output: str, from_name: str | None = None, text_column: str = "text",
                       label_column: str = "label", append: bool = False) -> Path:
    """`tool`'s export in `path` as a file of rows train reads (or, for a label-issues review answered in the tool, a
    corrections file for data.corrections) in `output`; with `append`, `output` is a training file the rows are added
    to (the ones it holds already, same text and label, left out). The file written."""
    _check_column_names(text_column, label_column)
    rows, report = read_annotations(Path(path), tool, from_name)
    if append:
        return _append(rows, report, tool, path, Path(output), text_column, label_column)
    target = check_output_file(output, "--output-file", {"FILE": path})
    fmt = format_of(target)
    multi_label = any(len(row.labels) > 1 for row in rows)
    _check_rows_fit(rows, fmt, path, "--output-file")
    flattened = sum(one_line(row.text) != row.text for row in rows) if fmt == "tsv" else 0
    review = _is_review(rows)
    if review:
        _write_corrections(target, fmt, rows, text_column, label_column)
    else:
        pair = any(r.text_pair is not None for r in rows)
        names = [text_column, *(["text_pair"] if pair else []), label_column]
        columns = Columns(text_column, "text_pair" if pair else None, label_column, "," if multi_label else None)
        with atomic_path(target) as draft:  # in place only once train's own reader gives back the rows meant
            write_records(draft, fmt, names, [_record(row, fmt, text_column, label_column) for row in rows])
            _check_read_back(draft, target, fmt, columns, rows)
    kind = (f"a corrections file for data.corrections (-o data.corrections={target})" if review else
            f"{'multi-label ' if multi_label else ''}rows for train (-o data.train={target}"
            f"{' -o task=multi_label' if multi_label else ''})")
    log(f"imported {len(rows)} labelled texts of {path} ({tool}) into {target}: {kind}"
        + "".join(f"; {note}" for note in _notes(report, flattened)))
    return target


def _check_column_names(text_column: str, label_column: str) -> None:
    """Column names a file train reads can carry: two different ones, each a name on one line (the same name twice
    lost every text, and exited 0)."""
    for flag, name in (("--text-column", text_column), ("--label-column", label_column)):
        if not name.strip() or any(c in name for c in "\t\r\n,\"") or name != name.strip():
            raise UserError(f"{flag} {name!r}: give a column name without tabs, line breaks, commas, quotes or blanks "
                            "around it")
    if text_column == label_column:
        raise UserError(f"--text-column and --label-column are both {text_column!r}: the labels would replace the "
                        "texts; give two different names")


def _check_rows_fit(rows: list[Labelled], fmt: str, path: str, flag: str) -> None:
    """What a file of `fmt` cannot hold so that train reads back the same labels, refused naming the way out."""
    multi_label = any(len(row.labels) > 1 for row in rows)
    if multi_label and fmt != "jsonl" and any("," in label for row in rows for label in row.labels):
        raise UserError(f"{path}: a label name holds ',' and a text has several labels: write {flag} as .jsonl, whose "
                        "label lists need no delimiter")
    odd = next((label for row in rows for label in row.labels
                if label != label.strip() or (fmt == "tsv" and one_line(label) != label)), None)
    if odd is not None:
        where = "blanks around it, which train strips" if odd != odd.strip() else "a tab or line break, which a .tsv " \
            "cannot hold"
        raise UserError(f"{path}: the label {odd!r} has {where}; rename it in the tool, or write {flag} as .jsonl")
    unreadable = next((row for row in rows for text in (row.text, row.text_pair) if text is not None
                       and not readable(text)), None)
    if unreadable is not None:
        raise UserError(f"{path}: the annotated text {unreadable.text[:40]!r} {NO_TOKEN}; remove that task")


def _check_read_back(draft: Path, target: Path, fmt: str, columns: Columns, rows: list[Labelled]) -> None:
    """The file written, read by train's reader: the rows must be the ones annotated (a text flattened to one line
    in a .tsv aside), else nothing is written."""
    flat = one_line if fmt == "tsv" else str
    meant = [(flat(row.text), flat(row.text_pair) if row.text_pair is not None else None, row.labels) for row in rows]
    try:
        read = [(e.text, e.text_pair, e.label_names) for e in read_examples(draft, fmt, columns)[0]]
    except DataError as exc:
        read = [str(exc).replace(str(draft), str(target))]
    if read != meant:
        differ = next((i for i, (a, b) in enumerate(zip(read, meant)) if a != b), min(len(read), len(meant)))
        raise UserError(f"--output-file {target}: as train would read it, row {differ + 1} is not the one annotated "
                        f"({read[differ] if differ < len(read) else 'missing'!r}); nothing was written: write a "
                        ".jsonl file instead")


def _is_review(rows: list[Labelled]) -> bool:
    """Whether the tool's answers are to a label-issues review (each task carried its row's file, line, given label)."""
    return all(all(key in row.fields for key in (FILE, LINE, "given")) for row in rows)


def _notes(report, flattened: int) -> list[str]:
    """What an import left out or decided for the user, one clause each."""
    notes = [f"{report.unlabelled} tasks without an answer left out"] if report.unlabelled else []
    if report.disagreeing:
        notes.append(f"{len(report.disagreeing)} tasks whose annotators disagree took the latest answer (ids "
                     f"{_some(report.disagreeing)})")
    if report.unsettled:
        notes.append(f"{len(report.unsettled)} texts whose annotators disagree left out (ids "
                     f"{_some(report.unsettled)}; the export does not say which answer came last: settle them in the "
                     "tool)")
    if flattened:
        notes.append(f"{flattened} texts held tabs or line breaks, written as one line (a .jsonl output keeps them)")
    return notes


def _some(ids: list) -> str:
    return f"{', '.join(map(str, ids[:5]))}{', ...' if len(ids) > 5 else ''}"


def _append(rows: list[Labelled], report, tool: str, path: str, target: Path, text_column: str,
            label_column: str) -> Path:
    """The labelled rows added to the training file `target` in its own format and columns (a column the tool has
    no value for left empty), then the whole file read back as train reads it: the rows it held and the new ones."""
    if not target.is_file():
        raise UserError(f"--append {target}: no such file; give the training file to add the rows to, or "
                        "--output-file FILE to write a new one")
    check_output_file(target, "--append", {"FILE": path})
    _check_rows_fit(rows, format_of(target), path, "--append")
    if _is_review(rows):
        raise UserError(f"{path} is a label-issues review answered in {tool}: it becomes a corrections file, not "
                        "training rows; give --output-file FILE (then -o data.corrections=FILE)")
    fmt = format_of(target)
    held = read_records(target, fmt, allow_empty=True)
    # every column the rows hold (a JSONL row may hold keys the first lacks)
    names = list(dict.fromkeys(key for _, r in held for key in r)) or [text_column, label_column]
    pair = any(row.text_pair is not None for row in rows)
    wanted = [text_column, label_column, *(["text_pair"] if pair else [])]
    missing = [name for name in wanted if name not in names]
    if missing:
        raise UserError(f"--append {target} has no column {missing[0]!r} (its columns: {', '.join(names)}); name its "
                        "columns with --text-column and --label-column")
    before = {_text_key(r, text_column, label_column) for _, r in held}
    records = [_record(row, fmt, text_column, label_column) for row in rows]
    new = [r for r in records if _text_key(r, text_column, label_column) not in before]
    if fmt == "jsonl":  # the rows it holds kept byte for byte (each with its own keys), the new ones after them
        kept = target.read_bytes().decode("utf-8")
        with atomic_file(target, newline="") as out:
            out.write(kept + ("\n" if kept and not kept.endswith("\n") else ""))
            out.writelines(json.dumps({n: r[n] for n in wanted}, ensure_ascii=False) + "\n" for r in new)
    else:  # a header names every column of every row: rewritten whole, a column the tool has no value for left empty
        write_records(target, fmt, names, [r for _, r in held] + [{n: r.get(n, "") for n in names} for r in new])
    multi_label = any(len(row.labels) > 1 for row in rows)
    columns = Columns(text_column, "text_pair" if pair else None, label_column, "," if multi_label else None)
    read, _ = read_examples(target, fmt, columns)  # train's reader: the file is what train will read
    if len(read) != len(held) + len(new):
        raise UserError(f"--append {target}: it reads back as {len(read)} rows, not the {len(held) + len(new)} "
                        "written (a text with a line break in a TSV?); write a .jsonl file instead")
    flattened = sum(one_line(row.text) != row.text for row in rows) if fmt == "tsv" else 0
    held_already = [f"{len(rows) - len(new)} it holds already, the same text and label, left out"] \
        if len(new) < len(rows) else []
    log(f"imported {len(rows)} labelled texts of {path} ({tool}) into {target}: {len(new)} rows added to its "
        f"{len(held)}" + "".join(f"; {note}" for note in held_already + _notes(report, flattened)))
    return target


def _label_text(value) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def _text_key(record: dict, text_column: str, label_column: str) -> tuple:
    return record.get(text_column), record.get("text_pair") or None, _label_text(record.get(label_column))


def _model(model_dir: str) -> Bundle:
    check_trained_model_folder(Path(model_dir), "whose vectors and calibrated answers these commands read")
    return load_bundle(model_dir)


def _texts_to_label(path: Path, bundle: Bundle) -> tuple[list[Example], list[dict]]:
    """The texts of `path` and what each task carries back: its line, or a label-issues review row's fields."""
    meta = bundle.meta
    fmt = format_of(path, meta.format)
    records = [] if path.suffix == ".txt" else read_records(path, fmt, meta.header, allow_empty=True)
    if records and all(key in records[0][1] for key in (FILE, LINE, SUGGESTED, DECISION)):  # a label-issues review
        examples = [Example(r[meta.text_column], r.get(meta.text_pair_column) if meta.text_pair_column else None,
                            None, line) for line, r in records]
        return examples, [_review_fields(path, line, r, meta.label_column) for line, r in records]
    texts, pairs, lines = read_texts(path, meta.text_column, meta.text_pair_column, header=meta.header)
    return ([Example(text, pairs[i] if pairs else None, None, line) for i, (text, line) in enumerate(zip(texts, lines))],
            [{"line": line} for line in lines])


def _review_fields(path: Path, line: int, record: dict, label_column: str) -> dict:
    """What a label-issues review row's task carries back, its cells checked (the review is the user's to edit)."""
    missing = [name for name in (label_column, "confidence") if name not in record]
    if missing:
        raise DataError(str(path), line, f"a label-issues review row without the column '{missing[0]}'; write the "
                                         "review again with label-issues")
    try:
        number, confidence = int(record[LINE]), float(record["confidence"])
    except ValueError:
        raise DataError(str(path), line, f"'{LINE}' must be a line number and 'confidence' a number (found "
                                         f"{record[LINE]!r}, {record['confidence']!r}); restore them as label-issues "
                                         "wrote them") from None
    if number < 1 or not 0 <= confidence <= 1:
        raise DataError(str(path), line, f"'{LINE}' {number} or 'confidence' {confidence} out of range (a line from "
                                         "1, a probability from 0 to 1); restore them as label-issues wrote them")
    return {FILE: record[FILE], LINE: number, "given": record[label_column], SUGGESTED: record[SUGGESTED],
            "confidence": confidence}


def _labelled_texts(model_dir: Path, bundle: Bundle, given: str | None) -> set[tuple[str, str | None]]:
    """(text, pair) of the rows labelled already: `--labelled`, else the training file the manifest records (if
    still there), else none."""
    path = given
    if path is None:
        recorded = training_provenance(model_dir).get("data", {}).get("train")
        path = recorded["path"] if recorded and Path(recorded["path"]).is_file() else None
        if path is None:
            log("select: no --labelled file, and the model's training file is not here: nothing counts as labelled")
            return set()
    meta = bundle.meta
    # the texts only (a .txt of one per line, or a table's text column): a row's label does not matter here
    texts, pairs, _ = read_texts(Path(path), meta.text_column, meta.text_pair_column, header=meta.header)
    return set(zip(texts, pairs or [None] * len(texts)))


def _scored(bundle: Bundle, examples: list[Example], batch_size: int, with_vectors: bool) -> Scores:
    progress = Progress(len(examples), "scoring", file=sys.stderr) if len(examples) > LONG_INPUT else None
    scores = score_texts(bundle, examples, batch_size, with_vectors, progress and progress.update)
    if progress:
        progress.close()
    return scores


def _tasks(bundle: Bundle, examples: list[Example], scores: Scores, fields: list[dict]) -> list[Task]:
    meta = bundle.meta
    answered = answers(scores.probabilities, meta.labels, meta.label_thresholds if meta.multi_label else None)
    return [Task(e.text, e.text_pair, labels, score, f) for e, (labels, score), f in zip(examples, answered, fields)]


def _how_to_load(tool: str, written: list[Path]) -> str:
    if tool == "label-studio":
        return (f" (a project's Settings > Labeling Interface takes {written[1].name}; Import takes "
                f"{written[0].name}; export it as JSON and `import-annotations --from label-studio`)")
    return (" (import it into a document-classification project; export it as JSONL and `import-annotations --from "
            "doccano`)")


def _record(row: Labelled, fmt: str, text_column: str, label_column: str) -> dict:
    flat = one_line if fmt == "tsv" else str  # a TSV field holds no tab or line break
    label = list(row.labels) if fmt == "jsonl" and len(row.labels) > 1 else ",".join(row.labels)
    return {text_column: flat(row.text), "text_pair": flat(row.text_pair or ""), label_column: label}


def _write_corrections(target: Path, fmt: str, rows: list[Labelled], text_column: str, label_column: str) -> None:
    """A label-issues review answered in the tool: its rows with the person's choice as the decision."""
    names = [FILE, LINE, text_column, label_column, SUGGESTED, "confidence", DECISION]
    write_records(target, fmt, names, [
        {FILE: r.fields[FILE], LINE: r.fields[LINE], text_column: r.text if fmt != "tsv" else one_line(r.text),
         label_column: r.fields["given"], SUGGESTED: r.fields.get(SUGGESTED, ""),
         "confidence": r.fields.get("confidence", ""), DECISION: ",".join(r.labels)} for r in rows])
