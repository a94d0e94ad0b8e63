"""`add-class` and `remove-class`: a prototype-head model with one class more or less, without retraining.

A class is a prototype (a direction in the encoder's space); the encoder and the other prototypes are left as they
are, so an old class's logit for any text is unchanged: a text keeps its answer unless the new class scores higher.
The new best/ records where it came from (the model it was made of, the examples) in its manifest and card."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.bundle import Bundle, load_bundle, save_bundle, seal_bundle
from paddle_ft.artifacts.manifest import MANIFEST, data_file, training_provenance
from paddle_ft.data.readers import read_texts
from paddle_ft.engine.prototypes import text_vectors
from paddle_ft.errors import UserError
from paddle_ft.io import check_output_folder, file_sha256
from paddle_ft.log import elapsed, log
from paddle_ft.model import BERTForTextClassification


def add_class(model_dir: str, label: str, examples: str | None, description: str | None, output: str) -> int:
    started = time.perf_counter()
    label = label.strip()
    if not label:
        raise UserError("--label is blank: name the new class")
    if examples is None and description is None:
        raise UserError("give --examples FILE (texts of the new class), --description TEXT, or both")
    bundle, target = _opened(model_dir, output)
    if label in bundle.meta.labels:
        raise UserError(f"--label {label}: the model already has that class; remove-class it first to make it again")
    meta, tokenizer = bundle.meta, bundle.tokenizer
    vectors, change = [], {"added": label, "from": _origin(Path(model_dir))}
    if examples is not None:
        texts = read_texts(Path(examples), meta.text_column, None, header=meta.header)[0]
        vectors.append(text_vectors(bundle.model, tokenizer, texts, meta.max_length, examples))
        change["examples"] = data_file(examples, len(texts))
    if description is not None:
        vectors.append(text_vectors(bundle.model, tokenizer, [description], meta.max_length, "--description"))
        change["description"] = description
    prototype = np.concatenate(vectors).mean(axis=0)  # the examples' mean and the description, one vector each
    prototypes = np.concatenate([_prototypes(bundle.model), prototype[None] / np.linalg.norm(prototype)])
    _write(bundle, prototypes, (*meta.labels, label), target, change, Path(model_dir))
    log(f"added {label} ({_source_of(change)}) to {model_dir}: {target} answers {len(meta.labels) + 1} labels; done in "
        f"{elapsed(time.perf_counter() - started)}")
    return 0


def remove_class(model_dir: str, label: str, output: str) -> int:
    bundle, target = _opened(model_dir, output)
    labels = bundle.meta.labels
    if label not in labels:
        raise UserError(f"--label {label} is not one of the model's classes ({', '.join(labels)})")
    if len(labels) <= 2:
        raise UserError(f"the model has {len(labels)} classes; a classifier needs two or more, so none can be removed")
    keep = [i for i, name in enumerate(labels) if name != label]
    _write(bundle, _prototypes(bundle.model)[keep], tuple(labels[i] for i in keep), target,
           {"removed": label, "from": _origin(Path(model_dir))}, Path(model_dir))
    log(f"removed {label} from {model_dir}: {target} answers {len(keep)} labels")
    return 0


def _opened(model_dir: str, output: str) -> tuple[Bundle, Path]:
    target = check_output_folder(output, "--output")
    if target.exists() and any(target.iterdir()):
        raise UserError(f"--output {target} already exists and is not empty; write the new model into a new folder")
    bundle = load_bundle(model_dir)
    if bundle.meta.head != "prototype":
        raise UserError(f"{model_dir} has a linear head, whose classes are learnt together: add-class and remove-class "
                        "change a prototype head (train with model.head: prototype)")
    return bundle, target


def _prototypes(model: BERTForTextClassification) -> np.ndarray:
    """[classes, hidden] unit vectors."""
    columns = model.classifier.weight.numpy().T
    return columns / np.linalg.norm(columns, axis=1, keepdims=True)


def _write(bundle: Bundle, prototypes: np.ndarray, labels: tuple[str, ...], target: Path, change: dict,
           source: Path) -> None:
    """The new best/: the same encoder and scale, these prototypes; what dev decided (the temperature, the abstain
    threshold) kept, and the scores, which were the old classes', left out."""
    old = bundle.model
    model = BERTForTextClassification(old.encoder, len(labels), bundle.meta.dropout, bundle.meta.pooling, "prototype")
    model.classifier.log_scale.set_value(old.classifier.log_scale)
    model.classifier.set_prototypes(prototypes)
    model.eval()
    save_bundle(target, model, bundle.tokenizer, dataclasses.replace(bundle.meta, labels=labels))
    provenance = {key: value for key, value in training_provenance(source).items() if key != "metrics"}
    history = [*provenance.get("class_changes", []), change]
    seal_bundle(target, target.parent.name if target.name == "best" else target.name,
                {**provenance, "class_changes": history})


def _origin(model_dir: Path) -> dict:
    manifest = model_dir / MANIFEST
    return {"model": str(model_dir), "manifest_sha256": file_sha256(manifest) if manifest.is_file() else None}


def _source_of(change: dict) -> str:
    parts = [f"{change['examples']['rows']} examples" if "examples" in change else "",
             "a description" if "description" in change else ""]
    return " and ".join(part for part in parts if part)

