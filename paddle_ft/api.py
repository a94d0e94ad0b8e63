"""paddle_ft from Python: train a classifier, load one to classify with.

    >>> import paddle_ft
    >>> results = paddle_ft.train("my.yaml", {"train.epochs": 5})   # what `tools/train.py --config my.yaml -o ...` does
    >>> results.test["accuracy"]
    >>> classify = paddle_ft.load("out/my/best")                     # a best/ folder or an export
    >>> classify("质量很好，物流快")["label"]                            # the answer every interface gives
    '好评'
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
    from paddle_ft.workflows.training import train as train_as_configured

    runtime.configure(fast_mkl=False)  # MKL's path is switched process-wide: only where asked (use_fast_mkl)
    if config is not None and not isinstance(config, (str, Path)):
        raise UserError(f"train(config=...): give the path of a YAML config, not a {type(config).__name__}")
    if config is not None and Path(config).is_dir():
        raise UserError(f"train({str(config)!r}): that is a folder; give the YAML config file (e.g. configs/demo.yaml)")
    return train_as_configured(None if config is None else str(config), override_list(overrides))


def override_list(overrides) -> list[str]:
    """`overrides` as `-o` items: from a dict {"train.epochs": 5} (values written as YAML) or a list of
    "KEY=VALUE" strings; anything else (a single string, pairs) is a `UserError` saying what to give."""
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        if not all(isinstance(key, str) for key in overrides):
            raise UserError("train(overrides={...}): the keys are dotted config keys, strings like 'train.epochs'")
        return [f"{key}={yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip()}"
                .removesuffix("\n...") for key, value in overrides.items()]
    if isinstance(overrides, (list, tuple)) and all(isinstance(item, str) for item in overrides):
        return list(overrides)
    raise UserError(f"train(overrides=...): give a dict {{'train.epochs': 5}} or a list ['train.epochs=5'], not "
                    f"{_shown(overrides)}")


def _shown(value) -> str:
    if isinstance(value, str):
        return f"one string ({value[:30]!r})"
    if isinstance(value, (list, tuple)):
        odd = next(item for item in value if not isinstance(item, str))
        return f"a list holding a {type(odd).__name__} ({odd!r:.40})"
    return f"a {type(value).__name__}"


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
    try:
        export_model(folder, scratch / "export")
        classifier = Classifier(scratch / "export", **options)
    except BaseException:  # a failed load leaves no temporary folder behind
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    weakref.finalize(classifier, shutil.rmtree, scratch, ignore_errors=True)
    return classifier
