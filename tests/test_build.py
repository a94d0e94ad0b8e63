import pytest
from conftest import ROOT

from paddle_ft.build import build_tokenizer
from paddle_ft.config import load_config
from paddle_ft.errors import ConfigError


def test_unloadable_backbone_is_a_config_error(tmp_path):
    config = load_config(None, [f"model.backbone={tmp_path / 'missing'}"])
    with pytest.raises(ConfigError, match="config key 'model.backbone'.*cannot load"):
        build_tokenizer(config.model)


def test_missing_vocab_file_is_a_config_error(tmp_path):
    config = load_config(None, [f"model.scratch.vocab_file={tmp_path / 'nope.txt'}"])
    with pytest.raises(ConfigError, match="model.scratch.vocab_file"):
        build_tokenizer(config.model)


def test_scoring_a_saved_model_imports_nothing_of_the_training_loop():
    import subprocess
    import sys

    code = ("import sys, paddle_ft.commands.evaluate, paddle_ft.inference.predictor, paddle_ft.serve.app; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('paddle_ft'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "paddle_ft.engine.evaluate" in loaded
    for module in ("paddle_ft.engine.trainer", "paddle_ft.engine.checkpoint", "paddle_ft.engine.distributed",
                   "paddle_ft.engine.run_folder", "paddle_ft.engine.optim",
                   "paddle_ft.commands.train", "paddle_ft.build"):
        assert module not in loaded, module


# the pipeline's layers, lowest first; a module may import from its own layer and those below it. inference sits
# below export because export proves itself with the Predictor (the parity check).
LAYERS = [("errors", "arguments", "log", "io", "ownership", "runtime"), ("text",), ("config",), ("data",),
          ("model", "convert", "backbone"), ("artifacts",), ("build",), ("engine",), ("analysis",), ("inference",),
          ("export",), ("serve",), ("commands",), ("bench",), ("cli", "__main__")]


def test_imports_run_one_way_through_the_layers():
    import ast

    def layer(module: str) -> int:
        top = module.split(".")[1] if module.startswith("paddle_ft.") else module
        return next(i for i, names in enumerate(LAYERS) if top in names)

    wrong = []
    for path in sorted((ROOT / "paddle_ft").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) == 2:
            continue  # the package's lazy public names (Predictor, Classifier) point down into it
        own = layer(".".join(parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # lazy imports inside functions too
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name == "paddle_ft":
                    name = f"paddle_ft.{node.names[0].name}"
                if name.startswith("paddle_ft.") and layer(name) > own:
                    wrong.append(f"{'/'.join(parts)} imports {name}")
    assert wrong == []
