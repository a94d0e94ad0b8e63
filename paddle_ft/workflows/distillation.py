"""Distillation: train a smaller student on a trained teacher's softened answers plus the labels (and, by the soft
loss alone, on unlabeled text); best/ is an ordinary classifier that eval, export and predict take."""
from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.bundle import load_bundle
from paddle_ft.artifacts.manifest import data_file
from paddle_ft.artifacts.meta import MODEL_META, is_model_folder
from paddle_ft.artifacts.run import Results
from paddle_ft.config import Config, load_config
from paddle_ft.data.corpus import read_corpus
from paddle_ft.data.features import Features, tokenize
from paddle_ft.data.readers import Example
from paddle_ft.engine import trainer
from paddle_ft.engine.amp import StepRunner
from paddle_ft.engine.objectives.distill import Distillation, release_device_memory, teacher_logits_of
from paddle_ft.errors import ConfigError
from paddle_ft.log import log
from paddle_ft.text import Truncation
from paddle_ft.workflows.build import build_model, build_splits, build_tokenizer, model_meta, read_dataset
from paddle_ft.workflows.run_report import report_if_asked
from paddle_ft.workflows.session import (data_record, drift_reference, opened_run, ready_to_train, run_engine,
                                         seal_best, shared_backbone)


def distill(config_path: str, overrides: list[str], teacher: str | None) -> Results | None:
    """Distil as the config says (`teacher`: sets distill.teacher); the best student's `Results` (None on the ranks
    other than 0)."""
    config = load_config(config_path, [*overrides, *([f"distill.teacher={teacher}"] if teacher else [])])
    _check(config)
    # loaded before the run folder opens, so a teacher that cannot be read stops nothing half-made; handed over in a
    # list that _distill empties, so nothing holds the teacher once its answers are known
    handed = [load_bundle(config.distill.teacher)]
    with opened_run(config, "distill") as (dist, folder, resume_from):
        return _distill(config, handed, dist, folder, resume_from)


def _distill(config: Config, handed: list, dist, folder, resume_from) -> Results | None:
    teacher_bundle = handed.pop()
    dataset = read_dataset(config.data, config.task)
    data = data_record(dataset, config.data.corrections) if dist.is_main else None
    if dataset.label_map.names != teacher_bundle.meta.labels:
        raise ConfigError("data.labels", f"the student's labels {list(dataset.label_map.names)} are not the "
                          f"teacher's {list(teacher_bundle.meta.labels)}: give data.labels in the teacher's order")
    _check_teacher_reads_as_the_student(teacher_bundle, model_meta(config, dataset.label_map), config)
    model_config = shared_backbone(config.model, dist)
    tokenizer = build_tokenizer(model_config)
    _check_same_vocabulary(tokenizer, teacher_bundle.tokenizer, config.distill.teacher)
    splits = build_splits(dataset, tokenizer, config.data.max_length, config.data.cache_dir,
                          Truncation.of(config.data))
    if config.distill.unlabeled:
        texts, origins = read_corpus(config.distill.unlabeled, config.data.text_column)
        splits = dataclasses.replace(splits, train=_with_unlabeled(splits.train, texts, tokenizer, config))
        log(f"distillation: {len(texts)} unlabeled texts learnt from the teacher alone")
        if dist.is_main:
            for number, path in enumerate(config.distill.unlabeled, 1):
                data[f"unlabeled-{number}"] = data_file(path, sum(origin == str(path) for origin, _ in origins))
    # the teacher's one pass, in the run's AMP precision (O1: its weights stay float32, its matmuls do not); then
    # it is let go, so that the student trains without a frozen teacher's weights on the device
    autocast = StepRunner(dataclasses.replace(config.train.amp, level="O1"), None).autocast
    teacher_logits = teacher_logits_of(teacher_bundle.model, splits.train, config.train.evaluation.batch_size,
                                       tokenizer.pad_token_id, dist, autocast)
    del teacher_bundle
    release_device_memory()
    model = build_model(model_config, len(dataset.label_map), tokenizer, config.data.max_length)
    ready_to_train(model, config, folder, dist, resume_from, dataset.label_map)
    folder = folder.with_classifier(tokenizer, model_meta(config, dataset.label_map))
    objective = Distillation(splits.label_names, splits.pad_token_id, teacher_logits=teacher_logits,
                             temperature=config.distill.temperature, alpha=config.distill.alpha)
    training = partial(trainer.train, model, splits, config, folder, dist, resume_from, objective)
    results = run_engine(training, folder, dist, "distill")
    if dist.is_main:
        seal_best(folder, config, data, results, drift_reference(dataset, splits, tokenizer.unk_token_id))
        for split in ("dev", "test"):
            report = getattr(results, split)
            if report is not None:
                log(f"{split} accuracy {report['accuracy']:.4f}  macro_f1 {report['macro_f1']:.4f} "
                    f"(best student, step {results.best_step})")
        report_if_asked(folder, config, dataset)
    return results


def _check(config: Config) -> None:
    if config.distill.teacher is None:
        raise ConfigError("distill.teacher", "distillation needs a teacher: pass --teacher OUT/best")
    if not is_model_folder(Path(config.distill.teacher)):
        raise ConfigError("distill.teacher", f"{config.distill.teacher} is not a trained model folder (no "
                          f"{MODEL_META}); give the best/ folder a training run wrote")
    if config.data.train is None:
        raise ConfigError("data.train", "distillation needs a training file; set data.train")
    for key, value, default in (("task", config.task, "single_label"),
                                ("train.loss", config.train.loss, "cross_entropy"),
                                ("train.class_weights", config.train.class_weights, None)):
        if value != default:
            raise ConfigError(key, f"is {value!r}; distillation is single-label cross-entropy with a teacher for now: "
                              "remove it")


def _check_teacher_reads_as_the_student(teacher, student_meta, config: Config) -> None:
    """The teacher scores the student's own inputs: the same task, inputs, truncation and labels, and positions
    for every token the student reads."""
    differences = teacher.meta.reads_differently_from(student_meta)
    if differences:
        raise ConfigError(differences[0].split(":")[0], f"the teacher {config.distill.teacher} and this student read "
                          f"texts differently ({'; '.join(differences)}, teacher first): set the student's as the "
                          "teacher's")
    positions = teacher.model.encoder.config.max_position_embeddings
    if config.data.max_length > positions:
        raise ConfigError("data.max_length", f"is {config.data.max_length}, but the teacher {config.distill.teacher} "
                          f"reads at most {positions} tokens; set data.max_length: {positions} or less")


def _check_same_vocabulary(student_tokenizer, teacher_tokenizer, teacher: str) -> None:
    """The teacher reads the student's token ids, so both must number tokens alike."""
    student = getattr(student_tokenizer, "slow", student_tokenizer).get_vocab()
    if student != teacher_tokenizer.get_vocab():
        raise ConfigError("model.scratch.vocab_file", f"the student's vocabulary is not the teacher's; use "
                          f"{Path(teacher) / 'vocab.txt'} (or the teacher's backbone)")


def _with_unlabeled(train: Features, texts: list[str], tokenizer, config: Config) -> Features:
    """The training rows, then the unlabeled texts' rows with label -1 (soft loss only)."""
    rows = [Example(text, None, None, i + 1) for i, text in enumerate(texts)]
    extra = tokenize(rows, tokenizer, config.data.max_length, None, Truncation.of(config.data))
    return Features(train.input_ids + extra.input_ids, train.token_type_ids + extra.token_type_ids,
                    np.concatenate([train.labels, np.full(len(extra), -1, dtype=train.labels.dtype)]))
