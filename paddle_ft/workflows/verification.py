"""Is a folder still what paddle_ft wrote (the `verify` command's work)? Every file against its `manifest.json`
(sha256); for an export the two engines against each other again; given `--data FILE`, one of the data files the
manifest records, the file against its recorded sha256 and the model's score on it against the recorded score. Each
difference is one line; any makes the command fail."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.artifacts.export_folder import EXPORT_INFO, read_export_info
from paddle_ft.artifacts.manifest import MANIFEST, differences, read_manifest
from paddle_ft.errors import UserError
from paddle_ft.export import export_model
from paddle_ft.inference.agreement import engines_agree
from paddle_ft.inference.predictor import Predictor
from paddle_ft.inference.quantize import labelled_accuracy
from paddle_ft.io import file_sha256


@dataclass(frozen=True)
class Verification:
    """What `verify_folder` checked: each difference found as one line, and what held."""

    problems: list[str]
    held: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_folder(folder: str, data: str | None = None) -> Verification:
    """`folder` (a best/ or an export) against its manifest, an export's engines against each other, and given `data`
    (one of the data files the manifest records) the model's score on it against the recorded one."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    problems = differences(folder, manifest)
    said = [f"its {len(manifest['files'])} files are as written"]
    if not problems and (folder / EXPORT_INFO).is_file():
        agreement, problem = engines_agree(folder)
        problems += [problem] if problem else []
        said += [] if agreement is None else [f"Paddle Inference and ONNX Runtime agree to {agreement:.3g}"]
    if not problems and data is not None:
        score, problem = _scores_again(folder, manifest, Path(data))
        problems += [problem] if problem else []
        said += [score] if score else []
    return Verification(problems, said)


def _scores_again(folder: Path, manifest: dict, data: Path) -> tuple[str | None, str | None]:
    """(what the check found, a problem line or None) for `data`, which must be one of the files the manifest
    records, unchanged; its score now must be the recorded one, within one text (engines may split a tie
    differently)."""
    if not data.is_file():
        raise UserError(f"--data {data} does not exist")
    recorded = manifest.get("data") or {}
    if not recorded:
        return None, (f"{folder / MANIFEST} records no data files (the model was not written by a training run of "
                      f"this paddle_ft): there is nothing to check {data} against")
    digest = file_sha256(data)
    split = next((name for name, entry in recorded.items() if entry["sha256"] == digest), None)
    if split is None:
        same_path = [name for name, entry in recorded.items() if Path(entry["path"]).resolve() == data.resolve()]
        if same_path:
            return None, (f"{data} has changed since the model was trained and scored on it (its sha256 differs "
                          f"from the one {MANIFEST} records for {same_path[0]})")
        files = ", ".join(f"{name} {entry['path']}" for name, entry in recorded.items())
        return None, f"{data} is none of the data files {folder / MANIFEST} records ({files}): its sha256 matches none"
    accuracy, texts, metric = _accuracy_now(folder, data)
    before = (manifest.get("metrics") or {}).get(split, {}).get(metric)
    quantized = read_export_info(folder).quantization if (folder / EXPORT_INFO).is_file() else None
    if quantized is not None:  # the manifest's scores are the fp32 model's: the int8 graph answers to its own check
        return _int8_scores_again(folder, data, split, quantized, accuracy, texts)
    if before is None:
        return f"{data} is its {split} file, unchanged; {metric} on it now {accuracy:.4f} (none was recorded)", None
    if abs(accuracy - before) > 1 / texts + 1e-9:
        return None, (f"{folder}: {metric} on {data} is {accuracy:.4f} now, {before:.4f} when it was written: the "
                      "model, its engine or this machine's numbers changed")
    return f"{data} is its {split} file, unchanged, and {metric} on it is {accuracy:.4f} as recorded", None


def _int8_scores_again(folder: Path, data: Path, split: str, check: dict, accuracy: float,
                       texts: int) -> tuple[str | None, str | None]:
    """A quantized export scored against what `quantize` measured of it (never against fp32's recorded score)."""
    if Path(check.get("data", "")).resolve() != data.resolve():
        return (f"{data} is its {split} file, unchanged; int8 accuracy on it now {accuracy:.4f} (quantize checked "
                f"int8 on {check.get('data')}, not on this file; fp32's recorded score does not apply)"), None
    if abs(accuracy - check["accuracy_int8"]) > 1 / texts + 1e-9:
        return None, (f"{folder}: int8 accuracy on {data} is {accuracy:.4f} now, {check['accuracy_int8']:.4f} when "
                      "quantize checked it: the int8 graph or its engine (ONNX Runtime) changed")
    return (f"{data} is its {split} file, unchanged, and int8 accuracy on it is {accuracy:.4f} as quantize recorded "
            f"(fp32: {check['accuracy_fp32']:.4f})"), None


def _accuracy_now(folder: Path, data: Path) -> tuple[float, int, str]:
    """(accuracy on `data` by the folder's model, texts, the metric's name): an export through its predictor; a
    saved model through an export of it made for the check."""
    if (folder / EXPORT_INFO).is_file():
        accuracy, texts, multi_label = labelled_accuracy(Predictor(folder), data)
    else:
        with tempfile.TemporaryDirectory(prefix="paddle_ft-verify-") as scratch:
            export_model(folder, Path(scratch) / "export", onnx=False)
            accuracy, texts, multi_label = labelled_accuracy(Predictor(Path(scratch) / "export"), data)
    return accuracy, texts, "subset_accuracy" if multi_label else "accuracy"
