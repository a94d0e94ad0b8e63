"""A prototype-head model (the `add-class` and `remove-class` commands' work) with one class more or less, without
retraining.

A class is a prototype (a direction in the encoder's space); the encoder and the other prototypes are left as they
are, so an old class's logit for any text is unchanged: a text keeps its answer unless the new class scores higher.
The new best/ records where it came from (the model it was made of, the examples) in its manifest and card."""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.bundle import Bundle, load_bundle, save_bundle, seal_bundle
from paddle_ft.artifacts.manifest import MANIFEST, data_file, training_provenance
from paddle_ft.data.readers import Columns, format_of, read_examples, read_texts
from paddle_ft.engine.prototypes import text_vectors
from paddle_ft.errors import UserError
from paddle_ft.io import check_new_output_folder, file_sha256, new_output_folder
from paddle_ft.log import elapsed, log
from paddle_ft.models.networks import BERTForTextClassification

BOUNDARY_MARGIN = 0.05  # logits: past the last reference row that keeps its answer, when none is above it
REFERENCE_ROWS = 500  # enough to place the bias at a share of 0.5% (the 3rd of 500); ~30 s of e5-small on 2 cores


@dataclass(frozen=True)
class ClassChange:
    """The model folder a class change wrote, and what it answers now."""

    model: Path
    labels: tuple[str, ...]
    change: dict
    """What the new folder's manifest records of the change (added or removed, from which model, ...)."""


NEW_MODEL = "write the new model into a new folder"


def add_class(model_dir: str, label: str, examples: str | None, description: str | None, output: str,
              reference: str | None = None, max_changed: float = 0.005) -> ClassChange:
    """A copy of the prototype-head model in `model_dir`, written to `output`, that also answers `label`: its prototype
    from the texts of `examples` and/or `description`, its bias set on labelled `reference` rows so that at most
    `max_changed` of them change their answer."""
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
    change = {"added": label, "from": _origin(Path(model_dir))}
    example_vectors = description_vector = None
    if examples is not None:
        texts = read_texts(Path(examples), meta.text_column, None, header=meta.header)[0]
        example_vectors = text_vectors(bundle.model, tokenizer, texts, meta.max_length, examples)
        change["examples"] = data_file(examples, len(texts))
    if description is not None:
        description_vector = text_vectors(bundle.model, tokenizer, [description], meta.max_length, "--description")[0]
        change["description"] = description
    head = _Head.of(bundle.model)
    prototype = _prototype(example_vectors, description_vector)
    reference_path = _reference_path(Path(model_dir), reference)
    reference_vectors = _reference_vectors(bundle, reference_path)
    leads = head.lead(prototype, reference_vectors)
    bias = _bias(leads, max_changed)
    change["reference"] = {**data_file(reference_path, len(reference_vectors)), "max_changed": max_changed}
    change["bias"] = round(bias, 4)
    _write(bundle, head.with_class(prototype, bias), (*meta.labels, label), target, change, Path(model_dir))
    log(f"added {label} ({_source_of(change)}) to {model_dir}: {target} answers {len(meta.labels) + 1} labels")
    log(f"the new class's bias is {bias:+.2f}, set on {reference_path}: it answers "
        f"{int((leads + bias > 0).sum())} of its {len(reference_vectors)} rows of the old classes"
        f"{_examples_won(head, example_vectors, description_vector, bias)}; done in "
        f"{elapsed(time.perf_counter() - started)}")
    return ClassChange(target, (*meta.labels, label), change)


def remove_class(model_dir: str, label: str, output: str) -> ClassChange:
    """A copy of the prototype-head model in `model_dir`, written to `output`, without the class `label`."""
    bundle, target = _opened(model_dir, output)
    labels = bundle.meta.labels
    if label not in labels:
        raise UserError(f"--label {label} is not one of the model's classes ({', '.join(labels)})")
    if len(labels) <= 2:
        raise UserError(f"the model has {len(labels)} classes; a classifier needs two or more, so none can be removed")
    keep = [i for i, name in enumerate(labels) if name != label]
    kept, change = tuple(labels[i] for i in keep), {"removed": label, "from": _origin(Path(model_dir))}
    _write(bundle, _Head.of(bundle.model).without(keep), kept, target, change, Path(model_dir))
    log(f"removed {label} from {model_dir}: {target} answers {len(keep)} labels")
    return ClassChange(target, kept, change)


def _opened(model_dir: str, output: str) -> tuple[Bundle, Path]:
    target = check_new_output_folder(output, "--output", NEW_MODEL)  # before the work; again before the write
    bundle = load_bundle(model_dir)
    if bundle.meta.head != "prototype":
        raise UserError(f"{model_dir} has a linear head, whose classes are learnt together: add-class and remove-class "
                        "change a prototype head (train with model.head: prototype)")
    return bundle, target


@dataclass(frozen=True)
class _Head:
    """A prototype head in numpy: the logit of unit text vectors x is scale * x @ prototypes.T + bias."""
    prototypes: np.ndarray  # [classes, hidden], unit rows
    bias: np.ndarray  # [classes]
    scale: float

    @classmethod
    def of(cls, model: BERTForTextClassification) -> _Head:
        columns = model.classifier.weight.numpy().T
        return cls(columns / np.linalg.norm(columns, axis=1, keepdims=True), model.classifier.bias.numpy(),
                   float(np.exp(model.classifier.log_scale.numpy()[0])))

    def logits(self, vectors: np.ndarray) -> np.ndarray:
        return self.scale * vectors @ self.prototypes.T + self.bias

    def lead(self, prototype: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """How far a class of `prototype` (bias 0) would beat each text's answer: [n]."""
        return self.scale * vectors @ prototype - self.logits(vectors).max(axis=1)

    def with_class(self, prototype: np.ndarray, bias: float) -> _Head:
        return _Head(np.concatenate([self.prototypes, prototype[None]]), np.append(self.bias, bias), self.scale)

    def without(self, keep: list[int]) -> _Head:
        return _Head(self.prototypes[keep], self.bias[keep], self.scale)


def _prototype(example_vectors: np.ndarray | None, description_vector: np.ndarray | None) -> np.ndarray:
    """The new class's unit prototype: the mean of its examples' vectors and its description's, one vector each."""
    parts = [v for v in (None if example_vectors is None else example_vectors.mean(axis=0), description_vector)
             if v is not None]
    mean = np.mean(parts, axis=0)
    return mean / np.linalg.norm(mean)


def _bias(leads: np.ndarray, max_changed: float) -> float:
    """The new class's bias from its `leads` over the reference rows (texts of the old classes): a prototype that is
    a mean of embeddings sits nearer every text than a learnt one (a sentence encoder's vectors share a direction),
    so unchecked it takes texts of the old classes. The bias lets it answer at most `max_changed` of them."""
    kept = float(np.quantile(leads, 1.0 - max_changed, method="higher"))  # the largest lead that does not answer
    above = leads[leads > kept]
    # the boundary halfway to the next row, so that float32 inference decides every reference row as here
    return -(kept + float(above.min() if above.size else kept + 2 * BOUNDARY_MARGIN)) / 2


def _examples_won(head: _Head, example_vectors: np.ndarray | None, description_vector: np.ndarray | None,
                  bias: float) -> str:
    """How many examples the new class would answer, each scored against a prototype made without it (an example
    is always near a mean that holds it)."""
    if example_vectors is None or len(example_vectors) < 2:
        return ""
    won = sum(head.lead(_prototype(np.delete(example_vectors, i, axis=0), description_vector),
                        example_vectors[i:i + 1])[0] + bias > 0 for i in range(len(example_vectors)))
    line = f"; it answers {won} of the {len(example_vectors)} examples, each scored without it"
    if won < len(example_vectors) / 2:
        line += (": to this model the new class's texts look like an old class's; retrain with its rows for a "
                 "model that tells them apart")
    return line


def _reference_path(model_dir: Path, given: str | None) -> Path:
    """--reference, else the model's dev file, else its train file (the paths its manifest records)."""
    if given is not None:
        return Path(given)
    data = training_provenance(model_dir).get("data", {})
    recorded = [data[key]["path"] for key in ("dev", "train") if key in data]
    for path in recorded:
        if Path(path).is_file():
            return Path(path)
    missing = f"the files its manifest names ({', '.join(recorded)}) are not here" if recorded else \
        "its manifest names no dev or train file"
    raise UserError(f"add-class sets how sure the new class must be from labelled rows of the model's classes and "
                    f"{missing}: give --reference FILE (e.g. the model's dev file)")


def _reference_vectors(bundle: Bundle, path: Path) -> np.ndarray:
    """Unit vectors of up to REFERENCE_ROWS rows of `path` labelled with one of the model's classes (rows of the new
    class, or of no class the model has, are left out)."""
    meta = bundle.meta
    rows = [e for e in read_examples(path, format_of(path, meta.format), Columns.of(meta, meta.multi_label))[0]
            if e.label in meta.labels]
    if not rows:
        raise UserError(f"{path}: no row is labelled with one of the model's classes ({', '.join(meta.labels)}); "
                        f"give --reference a labelled file of them")
    if len(rows) > REFERENCE_ROWS:
        rows = random.Random(0).sample(rows, REFERENCE_ROWS)
    return text_vectors(bundle.model, bundle.tokenizer, [e.text for e in rows], meta.max_length, str(path))


def _write(bundle: Bundle, head: _Head, labels: tuple[str, ...], target: Path, change: dict,
           source: Path) -> None:
    """The new best/: the same encoder and scale, this head's prototypes and biases; what dev decided (the
    temperature, the abstain threshold) kept, and the scores, which were the old classes', left out."""
    old = bundle.model
    model = BERTForTextClassification(old.encoder, len(labels), bundle.meta.dropout, bundle.meta.pooling, "prototype")
    model.classifier.log_scale.set_value(old.classifier.log_scale)
    model.classifier.set_prototypes(head.prototypes)
    model.classifier.bias.set_value(head.bias.astype(model.classifier.bias.numpy().dtype))
    model.eval()
    provenance = {key: value for key, value in training_provenance(source).items() if key != "metrics"}
    history = [*provenance.get("class_changes", []), change]
    with new_output_folder(target, "--output", NEW_MODEL):  # another add-class into it meanwhile: refused, not lost
        save_bundle(target, model, bundle.tokenizer, dataclasses.replace(bundle.meta, labels=labels))
        seal_bundle(target, target.parent.name if target.name == "best" else target.name,
                    {**provenance, "class_changes": history})


def _origin(model_dir: Path) -> dict:
    manifest = model_dir / MANIFEST
    return {"model": str(model_dir), "manifest_sha256": file_sha256(manifest) if manifest.is_file() else None}


def _source_of(change: dict) -> str:
    parts = [f"{change['examples']['rows']} examples" if "examples" in change else "",
             "a description" if "description" in change else ""]
    return " and ".join(part for part in parts if part)
