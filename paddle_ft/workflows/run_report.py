"""The training report of a finished run (`OUT/report.html`): the `report` command's work, and what training and
distillation write at their end where `train.runtime.write_report` asks for it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from paddle_ft.analysis.audit import audit
from paddle_ft.analysis.explain import Explainer
from paddle_ft.analysis.report import Answers, write_report
from paddle_ft.artifacts.bundle import load_bundle
from paddle_ft.artifacts.ownership import owned_folder, owner_of, require_owner
from paddle_ft.artifacts.run import Results, RunFiles
from paddle_ft.config import Config, load_config
from paddle_ft.data.features import tokenize
from paddle_ft.engine.evaluate import evaluate
from paddle_ft.errors import UserError
from paddle_ft.log import log
from paddle_ft.tokenization import fastest
from paddle_ft.workflows.build import Dataset, read_dataset

CLASSIFIER_RUNS = ("train", "distill")  # the runs whose best/ is a classifier to report on
EXPLAINED = 3  # the most confident mistakes the report explains
NEIGHBOUR_POOL = 10_000  # training texts searched for their nearest, at most (and no more than the report scored)


def report_run(run_dir: str) -> Path:
    """The report of the run in `run_dir`, written again; its page's path. A run that stopped before its end is
    reported as far as it went (its curves so far, its best model so far), the page marked partial."""
    folder = Path(run_dir)
    require_owner(folder, CLASSIFIER_RUNS, "report the output_dir of a training or distillation run")
    with owned_folder(folder, owner_of(folder), "OUT", "make its report once that has finished"):
        run = RunFiles(folder)
        if not run.started:
            run.read_results()  # a run that never began is refused before anything is read
        config = load_config(run.config_file)
        so_far = None if run.finished else run.results_so_far(config.train.evaluation.metric)
        if not run.finished and (so_far is None or not run.best_dir.is_dir()):
            raise UserError(f"{folder} stopped before its first evaluation saved a model: there is nothing to report "
                            "on yet; resume it with -o train.resume=auto")
        return write_run_report(folder, config, read_dataset(config.data, config.task), so_far)


def report_if_asked(folder, config: Config, dataset: Dataset) -> None:
    """The end of a classifier run (training, distillation; `folder` its RunFolder): report.html where
    train.runtime.write_report asks for it, and one line naming what the run wrote."""
    written = [folder.best_dir, folder.files.results_file]
    if config.train.runtime.write_report:
        written.append(write_run_report(folder.path, config, dataset))
    log(f"wrote {', '.join(map(str, written[:-1]))} and {written[-1]}")


def write_run_report(folder: Path, config: Config, dataset: Dataset, so_far: Results | None = None) -> Path:
    """The report of the run in `folder`: its best model's answers on test (else dev), and the data summary (with
    how much of each split the model's tokenizer reads as [UNK]); `so_far`: a stopped run's best evaluation."""
    bundle = load_bundle(RunFiles(folder).best_dir)
    tokenizer = fastest(bundle.tokenizer)
    summary = audit(dataset.examples, tokenizer, bundle.meta.max_length)
    return write_report(folder, _answers(bundle, tokenizer, config, dataset), summary, so_far)


def _answers(bundle, tokenizer, config: Config, dataset: Dataset) -> Answers | None:
    split = "test" if "test" in dataset.examples else "dev" if "dev" in dataset.examples else None
    if split is None or config.task == "multi_label":  # the pictures of answers are single-label ones
        return None
    rows = dataset.examples[split]
    features = tokenize(rows, tokenizer, bundle.meta.max_length, bundle.label_map, bundle.meta.truncation_rule)
    _, probabilities = evaluate(bundle.model, features, config.train.evaluation.batch_size, tokenizer.pad_token_id,
                                bundle.label_map.names, temperature=bundle.meta.temperature)
    gold = features.document_labels
    return Answers(split, [e.text for e in rows], gold, probabilities, bundle.meta.labels,
                   _explained_mistakes(bundle, rows, gold, probabilities, dataset.examples.get("train", [])))


def _explained_mistakes(bundle, rows, gold: np.ndarray, probabilities: np.ndarray, train_rows) -> list:
    """Explanations of the `EXPLAINED` most confident mistakes, each with its nearest training texts (among a seeded
    sample of them, no larger than `NEIGHBOUR_POOL` nor than the split scored: the search then costs at most one more
    pass of the kind the report already made, so a 12-layer encoder's report does not take as long as its training)."""
    predicted = probabilities.argmax(axis=1)
    wrong = np.flatnonzero(predicted != gold)
    worst = wrong[np.argsort(-probabilities[wrong, predicted[wrong]], kind="stable")][:EXPLAINED]
    if not len(worst):
        return []
    explainer = Explainer(bundle)
    if train_rows:
        chosen = np.random.default_rng(0).permutation(len(train_rows))[:min(NEIGHBOUR_POOL, len(rows))]
        explainer.index([train_rows[i] for i in np.sort(chosen)])
    return [explainer.explain(rows[i].text, rows[i].text_pair, neighbours=3 if train_rows else 0)[0] for i in worst]
