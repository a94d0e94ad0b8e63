"""Training a classifier: config -> data -> model -> engine, writing everything under `output_dir`; the run's report
(`run_report`) at its end where `train.runtime.write_report` asks for it. `train` is what the `train` command,
`paddle_ft.train()`, and the workflows that train many runs (folds, sweep, label issues) call."""
from __future__ import annotations

import dataclasses
import time
from functools import partial

from paddle_ft.analysis.audit import coverage_problem, leakage, unknown_shares
from paddle_ft.artifacts.run import Results
from paddle_ft.config import TASK_METRICS, load_config
from paddle_ft.data.augment import augmented
from paddle_ft.data.labels import read_label_descriptions
from paddle_ft.engine import trainer
from paddle_ft.engine.losses import class_weights
from paddle_ft.engine.objectives.classification import Classification
from paddle_ft.engine.objectives.few_shot import ContrastivePairs, repeated
from paddle_ft.engine.objectives.multi_label import MultiLabelClassification
from paddle_ft.engine.prototypes import start_prototypes
from paddle_ft.errors import ConfigError
from paddle_ft.log import elapsed, log
from paddle_ft.models.hierarchy import hierarchy_of
from paddle_ft.models.trim import TrimReport, trimmed_from
from paddle_ft.text import Truncation
from paddle_ft.workflows.build import (build_model, build_splits, build_tokenizer, model_meta, read_dataset,
                                       start_at_label_priors)
from paddle_ft.workflows.run_report import report_if_asked
from paddle_ft.workflows.session import (data_record, drift_reference, opened_run, ready_to_train, run_engine,
                                         seal_best, shared_backbone)


def train(config_path: str | None, overrides: list[str], on_eval=None) -> Results | None:
    """Train as the config says; the best model's `Results` (None on the ranks other than 0). `on_eval(step, dev
    metric)` is called after each dev evaluation (sweeps)."""
    started = time.perf_counter()
    config = load_config(config_path, overrides)
    if config.data.train is None and config.data.label_descriptions is None:
        raise ConfigError("data.train", "training needs a training file; set data.train (or, for a zero-shot model, "
                          "model.head: prototype and data.label_descriptions)")
    metric = config.train.evaluation.metric
    if metric in TASK_METRICS["pretraining"]:  # the config checked the rest against the task
        raise ConfigError("train.evaluation.metric", f"{metric} is pretraining's; a classifier is picked by "
                          f"{' or '.join(TASK_METRICS[config.task])}")
    with opened_run(config, "train") as (dist, folder, resume_from):
        return _train(config, dist, folder, resume_from, on_eval, started)


def _train(config, dist, folder, resume_from, on_eval, started: float) -> Results | None:
    descriptions = None
    if config.data.label_descriptions is not None:
        descriptions = read_label_descriptions(config.data.label_descriptions)
        if config.data.labels is None:  # zero-shot: the labels are the ones described, in the file's order
            config = dataclasses.replace(config, data=dataclasses.replace(config.data, labels=tuple(descriptions)))
    dataset = read_dataset(config.data, config.task)
    data = data_record(dataset, config.data.corrections) if dist.is_main else None
    if dist.is_main:
        warn_on_leakage(dataset)
    if config.data.augment.copies and "train" in dataset.examples:
        extra = augmented(dataset.examples["train"], config.data.augment, config.seed)
        dataset.examples["train"] = dataset.examples["train"] + extra
        if dist.is_main:
            log(f"augmentation: {len(extra)} edited copies of training rows added "
                f"({', '.join(config.data.augment.operations)}; dev and test untouched)")
    model_config = shared_backbone(config.model, dist)
    tokenizer = build_tokenizer(model_config)
    splits = build_splits(dataset, tokenizer, config.data.max_length, config.data.cache_dir,
                          Truncation.of(config.data))
    if dist.is_main:
        log_coverage(splits, tokenizer.unk_token_id, trimmed_from(config.model.backbone))
    model = build_model(model_config, len(dataset.label_map), tokenizer, config.data.max_length)
    if config.task == "multi_label" and resume_from is None and len(splits.train):
        start_at_label_priors(model, splits.train.document_labels)
    if config.model.head == "prototype" and resume_from is None:
        source = start_prototypes(model, tokenizer, splits.label_names, config.data.max_length, descriptions,
                                  splits.train, config.data.label_descriptions)
        if dist.is_main:
            log(f"prototype head: each class's prototype starts as {source}")
    ready_to_train(model, config, folder, dist, resume_from, dataset.label_map)
    folder = folder.with_classifier(tokenizer, model_meta(config, dataset.label_map))
    if config.data.train is None:
        if dist.active:
            raise ConfigError("data.train", "is not set: a zero-shot model trains nothing, so run it as one process")
        log("zero-shot: no training file, so no training step; saving the model and scoring it")
        results = trainer.keep_untrained(model, splits, config, folder, objective(config, splits, dist))
    else:
        seen, engine_config = as_the_engine_sees(splits, config)
        results = run_engine(partial(trainer.train, model, seen, engine_config, folder, dist, resume_from,
                                     objective(config, splits, dist), on_eval), folder, dist, "train")
    if dist.is_main:
        log("writing the model card and the manifest" + (", then report.html (charts, the most confident mistakes "
                                                         "explained)" if config.train.runtime.write_report else ""))
        seal_best(folder, config, data, results, drift_reference(dataset, splits, tokenizer.unk_token_id))
        for split in ("dev", "test"):
            report = getattr(results, split)
            if report is not None:
                scores = "  ".join(f"{m} {report[m]:.4f}" for m in TASK_METRICS[config.task])
                log(f"{split} {scores} (best model, step {results.best_step})")
        report_if_asked(folder, config, dataset)
        log(f"done in {elapsed(time.perf_counter() - started)}; next: python -m paddle_ft export "
            f"--model {folder.best_dir} --output {folder.path / 'export'}"
            + ("" if config.train.runtime.write_report else
               f"; the run's page: python -m paddle_ft report {folder.path}"))
    return results


def as_the_engine_sees(splits, config):
    """(splits, config) as the training loop is given them: the few-shot recipe's epoch passes over the rows several
    times, in batches of any lengths (grouped by length, a batch would hold copies of the same few texts, and few
    pairs to learn from)."""
    if config.train.recipe != "few_shot":
        return splits, config
    return (dataclasses.replace(splits, train=repeated(splits.train, config.train.few_shot.iterations)),
            dataclasses.replace(config, data=dataclasses.replace(config.data, group_by_length=False)))


def log_coverage(splits, unk_id: int | None, trim: TrimReport | None = None) -> None:
    """How much of each split the tokenizer reads as [UNK]; a warning with the fix where it is too much (for a
    trimmed backbone, trimming it with more text)."""
    shares = {name: unknown_shares(features.input_ids, unk_id) for name in ("train", "dev", "test")
              if (features := getattr(splits, name)) is not None and len(features)}
    log("[UNK] tokens: " + ", ".join(f"{name} {tokens:.2%}" for name, (tokens, _) in shares.items()))
    for name, (tokens, texts) in shares.items():
        problem = coverage_problem(name, tokens, texts, trim)
        if problem:
            log(f"warning: {problem}")


def warn_on_leakage(dataset) -> None:
    """The cheap part of `audit`: texts of dev or test that are also in train make the scores optimistic."""
    for pair, found in leakage(dataset.examples).items():
        if found["rows"]:
            later, earlier = pair.split("_in_")
            log(f"warning: {found['rows']} {later} texts ({found['share']:.1%}) are also in {earlier}: its scores will "
                f"be optimistic; python -m paddle_ft audit --config ... lists them")


def objective(config, splits, dist) -> Classification | MultiLabelClassification:
    """The classifier's loss as the config sets it, the class weights made concrete (and logged)."""
    tc, hierarchy = config.train, hierarchy_of(splits.label_names, config.data.label_hierarchy)
    if config.task == "multi_label":
        return MultiLabelClassification(splits.label_names, splits.pad_token_id, hierarchy=hierarchy)
    if tc.recipe == "few_shot":
        if dist.is_main:
            log(f"few-shot recipe: contrastive tuning on pairs of the {len(splits.train)} training rows, each "
                f"class's prototype their mean ({tc.few_shot.iterations} passes per epoch)")
        return ContrastivePairs(splits.label_names, splits.pad_token_id, calibration=tc.calibration,
                                target_coverage=tc.decision.target_coverage, abstain_below=tc.decision.abstain_below,
                                rows=splits.train, batch_size=tc.evaluation.batch_size)
    weights = class_weights(tc.class_weights, splits.train.labels, splits.label_names)
    if weights is not None and dist.is_main:
        how = "auto: inverse class frequency" if tc.class_weights == "auto" else "train.class_weights"
        log(f"class weights ({how}): " + ", ".join(f"{n} {w:.4g}" for n, w in zip(splits.label_names, weights)))
    return Classification(splits.label_names, splits.pad_token_id, tc.loss, weights, tc.focal_gamma, tc.calibration,
                          target_coverage=tc.decision.target_coverage, abstain_below=tc.decision.abstain_below,
                          hierarchy=hierarchy, level_loss=tc.level_loss if hierarchy else 0.0,
                          packed=tc.runtime.packed_batches)
