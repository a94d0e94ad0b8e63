"""Which rows of train and dev are probably mislabelled (the `label-issues` command's work). Every row is scored by a
model that did not train on it, confident learning ranks the rows over those out-of-fold probabilities
(`analysis.label_issues`), and a person gets what reviewing takes. The models are one of:

    fine-tune    K folds, each trained as `cv` trains them (resumable, fingerprinted): K training runs
    embeddings   the config's encoder as it starts, frozen: one forward pass over the rows, then a logistic regression
                 per fold on their vectors (`analysis.linear_probe`), minutes where K fine-tunings take hours
    auto         embeddings for an encoder of more than FINE_TUNE_UP_TO weights in its layers, else fine-tune

It writes:

    OUT/label_issues.tsv   rank, file, line, given label, suggested label, confidence, the given label's probability
    OUT/report.html        the same as a page, the most probable issues first
    OUT/review.<format>    the flagged rows in the data's own format with an empty `decision` column; filled in, it is
                           read back by training through `data.corrections` (data/corrections.py)
    OUT/label_issues.json  the counts, and with --prune the comparison

`--prune` trains the config twice more, with every row (OUT/all-rows) and without the flagged ones (OUT/pruned),
and compares the two on test."""
from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paddle_ft import runtime
from paddle_ft.analysis.cv import stratified_folds
from paddle_ft.analysis.fingerprint import check_same_work, fingerprint, read_work, write_work
from paddle_ft.analysis.label_issues import METHODS, LabelIssue, find_label_issues
from paddle_ft.analysis.linear_probe import out_of_fold_probabilities
from paddle_ft.analysis.report import write_page
from paddle_ft.artifacts.bundle import load_bundle
from paddle_ft.artifacts.ownership import clear, owned_folder
from paddle_ft.artifacts.run import RunFiles
from paddle_ft.config import TASK_METRICS, Config, load_config
from paddle_ft.data.corrections import DECISION, FILE, LINE, SUGGESTED
from paddle_ft.data.features import tokenize
from paddle_ft.data.readers import Columns, one_line, write_examples, write_records
from paddle_ft.engine.evaluate import embed_rows, evaluate
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.log import log
from paddle_ft.text import Truncation
from paddle_ft.tokenization import fastest
from paddle_ft.workflows import training
from paddle_ft.workflows.build import build_model, build_tokenizer, format_of_split, resolve_backbone
from paddle_ft.workflows.folds import Fold, Pool, labelled_pool, train_folds
from paddle_ft.workflows.recipe import EncoderFacts, encoder_facts

FINGERPRINT = "label-issues-fingerprint.json"
OUT_OF_FOLD = "out-of-fold.json"  # beside each fold's data files (OUT/folds/fold-N/): its held-out rows' probabilities
SHOWN_ON_THE_PAGE = 500
# weights in the transformer layers up to which `auto` fine-tunes the folds: the demo's 2-layer encoder (0.4M) trains
# a fold in seconds, multilingual-e5-small (21M) in about ten minutes an epoch on 2 cores
FINE_TUNE_UP_TO = 5_000_000


@dataclass(frozen=True)
class LabelIssues:
    """What `find_issues` found and wrote."""

    flagged: int
    method: str
    """embeddings or fine-tune: how the out-of-fold probabilities were made."""
    rows: int
    """The labelled rows of train and dev that were scored."""
    table: Path
    """label_issues.tsv"""
    page: Path
    review: Path
    """The review file: its decision column filled in, training reads it as data.corrections."""
    summary: dict
    """label_issues.json's content (with --prune, the comparison on test)."""


@dataclass(frozen=True)
class Search:
    """How `find_issues` looks for the issues."""

    folds: int
    output: str
    """The folder of everything it writes; a rerun into it resumes the folds there."""
    method: str = "auto"
    """One of METHODS."""
    prune: bool = False
    restart: bool = False
    fold_reports: bool = False


def find_issues(config_path: str | None, overrides: list[str], search: Search) -> LabelIssues:
    """The rows of the config's train and dev that out-of-fold models of `search.folds` folds find mislabelled."""
    folds, prune = search.folds, search.prune
    # each fold's report.html would cost minutes at a real encoder's size and show a model nobody keeps: written only
    # when asked, whatever the config says
    overrides = [*overrides, f"output_dir={search.output}",
                 f"train.runtime.write_report={str(search.fold_reports).lower()}"]
    config = load_config(config_path, overrides)
    if prune and config.data.test is None:
        raise ConfigError("data.test", "--prune compares a run with every row and one without the flagged rows on "
                          "test: set data.test")
    with owned_folder(config.output_dir, "label-issues", "--output") as root:
        if search.restart:
            clear(root)
        method = _chosen(search.method, config)
        work = fingerprint(config, folds=folds, method=method)
        check_same_work(root, read_work(root / FINGERPRINT), work, "label-issues run")
        pool = labelled_pool(config, folds)
        write_work(root / FINGERPRINT, work)
        if method == "fine-tune":
            probabilities = _out_of_fold(pool, train_folds(config_path, overrides, config, pool, folds, root), root,
                                         config.train.evaluation.batch_size)
        else:
            probabilities = _probed_out_of_fold(config, pool, folds)
        issues = _find(pool, probabilities, config.task == "multi_label")
        summary = {"folds": folds, "method": method, "rows": len(pool.examples), "flagged": len(issues),
                   "given_to_suggested": _pairs(issues)}
        _write_table(root / "label_issues.tsv", pool, issues)
        review = _write_review(root, config, pool, issues)
        if prune:
            summary["prune"] = _prune(config_path, overrides, config, pool, issues, root)
        write_text_atomically(root / "label_issues.json", json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
        page = _write_page(root / "report.html", pool, issues, summary)
    return LabelIssues(len(issues), method, len(pool.examples), root / "label_issues.tsv", page, review, summary)


def _chosen(method: str, config: Config) -> str:
    """The method `auto` stands for with this config's encoder (said in one line), or `method` as given."""
    if method not in METHODS:
        raise UserError(f"label-issues method {method!r}: choose one of {', '.join(METHODS)}")
    if method != "auto":
        return method
    weights = _layer_weights(config)
    chosen = "fine-tune" if weights is not None and weights <= FINE_TUNE_UP_TO else "embeddings"
    size = "is of unknown size" if weights is None else f"has {weights / 1e6:.1f}M weights in its layers"
    how = ("K fine-tunings, each seconds to minutes at this size" if chosen == "fine-tune" else
           "its frozen embeddings and a logistic regression per fold, instead of K fine-tunings of hours at this "
           "size")
    log(f"label-issues: the encoder {size}: {how} (--method embeddings or fine-tune chooses)")
    return chosen


def _layer_weights(config: Config) -> int | None:
    if config.model.backbone is None:
        s = config.model.scratch
        return EncoderFacts(s.num_layers, s.hidden_size, s.intermediate_size, 0, False).layer_weights
    facts = encoder_facts(Path(resolve_backbone(config.model).backbone))
    return None if facts is None else facts.layer_weights


def _probed_out_of_fold(config: Config, pool: Pool, folds: int) -> np.ndarray:
    """[rows, labels]: each row's probabilities from a logistic regression on the frozen encoder's vectors of the
    other folds' rows (the folds `train_folds` would cut)."""
    label_map, multi_label = pool.dataset.label_map, config.task == "multi_label"
    model_config = resolve_backbone(config.model)
    tokenizer = build_tokenizer(model_config)
    model = build_model(model_config, len(label_map.names), tokenizer, config.data.max_length)
    runtime.apply_cpu_settings(config.train.runtime.cpu_threads)  # every core, as training has them
    features = tokenize(pool.examples, fastest(tokenizer), config.data.max_length, label_map,
                        Truncation.of(config.data))
    log(f"label-issues: embedding {len(pool.examples)} rows with the frozen encoder")
    vectors = features.pool(embed_rows(model, features, config.train.evaluation.batch_size, tokenizer.pad_token_id))
    parts = stratified_folds([e.label_key for e in pool.examples], folds, config.seed)
    # label ids, or for multi-label a 0/1 row per text
    return out_of_fold_probabilities(vectors, np.asarray(features.document_labels), parts, multi_label)


def _out_of_fold(pool: Pool, folds: list[Fold], root: Path, batch_size: int) -> np.ndarray:
    """[rows, labels]: each row's probabilities from the fold model that held it out (read back when a rerun finds
    them written)."""
    names = pool.dataset.label_map.names
    probabilities = np.zeros((len(pool.examples), len(names)))
    for fold in folds:
        saved = root / "folds" / f"fold-{fold.number}" / OUT_OF_FOLD
        if saved.is_file():
            probabilities[fold.held_out] = json.loads(saved.read_text(encoding="utf-8"))
            continue
        bundle = load_bundle(fold.run.best_dir)
        meta, tokenizer = bundle.meta, fastest(bundle.tokenizer)
        features = tokenize([pool.examples[i] for i in fold.held_out], tokenizer, meta.max_length, bundle.label_map,
                            meta.truncation_rule)
        _, scored = evaluate(bundle.model, features, batch_size, tokenizer.pad_token_id, names,
                             thresholds=meta.label_thresholds if meta.multi_label else None,
                             temperature=meta.temperature)
        probabilities[fold.held_out] = scored
        saved.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(saved, json.dumps(scored.tolist()))
    return probabilities


def _find(pool: Pool, probabilities: np.ndarray, multi_label: bool) -> list[LabelIssue]:
    label_map = pool.dataset.label_map
    if multi_label:
        gold = np.zeros(probabilities.shape)
        for row, example in enumerate(pool.examples):
            gold[row, [label_map.id(name) for name in example.label_names]] = 1
    else:
        gold = np.array([label_map.id(e.label) for e in pool.examples])
    return find_label_issues(gold, probabilities, label_map.names, multi_label)


def _pairs(issues: list[LabelIssue]) -> dict[str, int]:
    """How many flagged rows go from each given label to each suggested one, the most frequent first."""
    counts = Counter(f"{','.join(i.given)} -> {','.join(i.suggested)}" for i in issues)
    return dict(counts.most_common())


def _write_table(path: Path, pool: Pool, issues: list[LabelIssue]) -> None:
    rows = [{"rank": rank, FILE: pool.origins[i.row][0], LINE: pool.origins[i.row][1], "given": ",".join(i.given),
             SUGGESTED: ",".join(i.suggested), "confidence": f"{i.confidence:.4f}",
             "given_probability": f"{i.given_probability:.4f}", "text": one_line(pool.examples[i.row].text)}
            for rank, i in enumerate(issues, start=1)]
    write_records(path, "tsv", ["rank", FILE, LINE, "given", SUGGESTED, "confidence", "given_probability", "text"],
                  rows)


def _write_review(root: Path, config: Config, pool: Pool, issues: list[LabelIssue]) -> Path:
    """The flagged rows in the data's format: its own columns (the given label in its label column), then
    `suggested`, `confidence` and an empty `decision`."""
    fmt = format_of_split(config.data, config.data.train)
    columns = Columns.of(config.data, config.task == "multi_label")
    delimiter = columns.label_delimiter or ","
    names = [FILE, LINE, *(n for n in (columns.text, columns.text_pair, columns.label) if n), SUGGESTED,
             "confidence", DECISION]
    records = []
    for issue in issues:
        example = pool.examples[issue.row]
        text = example.text if fmt != "tsv" else one_line(example.text)
        record = {FILE: pool.origins[issue.row][0], LINE: pool.origins[issue.row][1], columns.text: text,
                  columns.label: delimiter.join(issue.given), SUGGESTED: delimiter.join(issue.suggested),
                  "confidence": round(issue.confidence, 4), DECISION: ""}
        if columns.text_pair:
            record[columns.text_pair] = example.text_pair
        records.append(record)
    path = root / f"review.{fmt}"
    write_records(path, fmt, names, records)
    return path


def _prune(config_path: str | None, overrides: list[str], config: Config, pool: Pool, issues: list[LabelIssue],
           root: Path) -> dict:
    """Test scores of the config trained on every row (as it reads them, corrections included) and on the same
    rows less the flagged ones, side by side."""
    flagged = {pool.origins[i.row] for i in issues}
    fmt = format_of_split(config.data, config.data.train)
    columns, data = Columns.of(config.data, config.task == "multi_label"), root / "pruned-data"
    data.mkdir(exist_ok=True)
    pruned = ["data.corrections=null"]  # the rows written below already hold any corrections
    for split in ("train", "dev"):
        path = pool.dataset.paths.get(split)
        if path is not None:
            write_examples(data / f"{split}.{fmt}", fmt, columns, [e for e in pool.dataset.examples[split]
                                                                   if (path, e.line) not in flagged])
            pruned.append(f"data.{split}={data / f'{split}.{fmt}'}")
    scores = {}
    for name, data_overrides, folder in (("all_rows", [], root / "all-rows"), ("pruned", pruned, root / "pruned")):
        run_files = RunFiles(folder)
        if not run_files.finished:
            log(f"label-issues --prune: training {name.replace('_', ' ')} in {folder}")
            resume = ["train.resume=auto"] if run_files.started else []
            training.train(config_path, [*overrides, f"output_dir={folder}", *data_overrides, *resume])
        test = run_files.read_results().test
        scores[name] = {metric: test[metric] for metric in TASK_METRICS[config.task]}
    scores["rows_left_out"] = len(flagged)
    return scores


def _write_page(path: Path, pool: Pool, issues: list[LabelIssue], summary: dict) -> Path:
    counts = "".join(f"<li>{html.escape(pair)}: {n}</li>" for pair, n in summary["given_to_suggested"].items())
    rows = "".join(
        f"<tr><td>{rank}</td><td>{html.escape(pool.origins[i.row][0])}:{pool.origins[i.row][1]}</td>"
        f"<td>{html.escape(','.join(i.given))}</td><td>{html.escape(','.join(i.suggested))}</td>"
        f"<td>{i.confidence:.3f}</td><td>{i.given_probability:.3f}</td>"
        f"<td>{html.escape(pool.examples[i.row].text)}</td></tr>"
        for rank, i in enumerate(issues[:SHOWN_ON_THE_PAGE], start=1))
    sections = [f"<p>{summary['flagged']} of {summary['rows']} labelled rows of train and dev are probably "
                f"mislabelled: each was scored by a model of {summary['folds']} folds that did not train on it, and "
                "confident learning flagged those whose given label the model finds less likely than the labels' "
                "own thresholds allow. Most probable first (the given label's probability, lowest first).</p>",
                f"<h2>From which label to which</h2><ul>{counts}</ul>"]
    if "prune" in summary:
        prune = summary["prune"]
        scores = "".join(f"<tr><td>{html.escape(m)}</td><td>{prune['all_rows'][m]:.4f}</td>"
                         f"<td>{prune['pruned'][m]:.4f}</td></tr>" for m in prune["all_rows"])
        sections.append(f"<h2>Trained without them</h2><p>The config trained again on every row and without the "
                        f"{prune['rows_left_out']} flagged rows, scored on test:</p><table><tr><th>metric</th>"
                        f"<th>every row</th><th>without the flagged</th></tr>{scores}</table>")
    more = f" (the first {SHOWN_ON_THE_PAGE}; label_issues.tsv has all)" if len(issues) > SHOWN_ON_THE_PAGE else ""
    sections.append(f"<h2>The rows{more}</h2><table><tr><th>rank</th><th>file:line</th><th>given</th>"
                    f"<th>suggested</th><th>confidence</th><th>given label's probability</th><th>text</th></tr>"
                    f"{rows}</table>")
    return write_page(path, "Probable label issues", sections)
