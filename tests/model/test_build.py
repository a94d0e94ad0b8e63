import pytest

from paddle_ft.workflows.build import build_tokenizer
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


@pytest.mark.slow  # a fresh interpreter
def test_scoring_a_saved_model_imports_nothing_of_the_training_loop():
    import subprocess
    import sys

    code = ("import sys, paddle_ft.workflows.evaluation, paddle_ft.inference.predictor, paddle_ft.serve.app; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('paddle_ft'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "paddle_ft.engine.evaluate" in loaded
    for module in ("paddle_ft.engine.trainer", "paddle_ft.engine.checkpoint", "paddle_ft.engine.distributed",
                   "paddle_ft.engine.run_folder", "paddle_ft.engine.optim",
                   "paddle_ft.workflows.training", "paddle_ft.workflows.session"):
        assert module not in loaded, module
