"""paddle_ft from Python: train a classifier, load one to classify with.

    >>> import paddle_ft
    >>> results = paddle_ft.train("my.yaml", {"train.epochs": 5})   # what `tools/train.py --config my.yaml -o ...` does
    >>> results.test["accuracy"]
    >>> classify = paddle_ft.load("out/my/best")                     # a best/ folder or an export
    >>> classify("质量很好，物流快")
    [{'label': '好评', 'score': 0.98}]
    >>> why = paddle_ft.Explainer.load("out/my/best")                 # token attributions, nearest training texts
    >>> why.explain("质量很好，物流快")[0].top_tokens(3)
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import yaml

from paddle_ft.artifacts.export_folder import EXPORT_INFO
from paddle_ft.artifacts.meta import is_model_folder
from paddle_ft.artifacts.run import Results
from paddle_ft.errors import UserError
from paddle_ft.inference.classifier import Classifier


def train(config: str | Path | None = None, overrides: dict | list[str] | None = None) -> Results:
    """Train as the YAML file `config` says (None: the defaults), with `overrides` as `-o` gives them: a dict
    {"train.epochs": 5, "data.labels": ["负面", "正面"]} or a list ["train.epochs=5"]. Returns the best model's
    `Results` (`.dev`, `.test`: every metric; `.best_step`); the run folder is the config's output_dir. Bad input
    raises `UserError` with the one-line message the command line prints."""
    from paddle_ft import runtime
    from paddle_ft.commands.train import trained

    runtime.configure()
    if isinstance(overrides, dict):
        overrides = [f"{key}={yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip()}"
                     .removesuffix("\n...") for key, value in overrides.items()]
    return trained(None if config is None else str(config), list(overrides or []))


def load(folder: str | Path, **options) -> Classifier:
    """A `Classifier` (a function from texts to labels) on an export, or on a `best/` folder a training run wrote
    (exported first, into a temporary folder removed when the classifier is). `options` go to `Classifier`
    (top_k, batch_size, truncation, device, cpu_threads, ...)."""
    folder = Path(folder)
    if (folder / EXPORT_INFO).is_file():
        return Classifier(folder, **options)
    if not is_model_folder(folder):
        raise UserError(f"{folder} is neither an export nor a model folder a training run wrote (OUT/best)")
    from paddle_ft.export import export_model

    scratch = Path(tempfile.mkdtemp(prefix="paddle_ft-load-"))
    export_model(folder, scratch / "export")
    classifier = Classifier(scratch / "export", **options)
    weakref.finalize(classifier, shutil.rmtree, scratch, ignore_errors=True)
    return classifier
