"""Finished work recognised by what produced it (issue 27, root 3): a cv or sweep rerun into the same folder
resumes only work made with the same config, data, folds and space; anything else is refused in one line that
names what differs, and --restart starts afresh."""
import json

import pytest

from conftest import DEMO, overrides, synthetic_rows, write_tsv
from paddle_ft.analysis.fingerprint import differences, fingerprint
from paddle_ft.cli import main
from paddle_ft.config import load_config

SPACE = "sampler: random\ntrials: 1\npruner: none\nparams:\n  train.optimizer.learning_rate: {type: float, low: 1.0e-3, " \
        "high: 3.0e-3}\n"


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_fingerprint_names_each_setting_and_data_file_that_changed(tiny_config_args, tmp_path):
    config = load_config(DEMO, overrides(tiny_config_args)[1::2])
    before = fingerprint(config, folds=2)
    write_tsv(tmp_path / "data" / "train.tsv", synthetic_rows(240, seed=9))  # same path, other rows
    after = fingerprint(load_config(DEMO, [*overrides(tiny_config_args)[1::2], "train.optimizer.learning_rate=0.01",
                                           "output_dir=elsewhere", "train.resume=auto"]), folds=3)
    assert differences(before, after) == ["train.optimizer.learning_rate: 0.003 then, 0.01 now",
                                          "the file of data.train (its checksum)", "folds: 2 then, 3 now"]
    assert differences(before, before) == []


@pytest.mark.slow  # four short trainings
def test_a_cv_rerun_with_other_folds_or_settings_is_refused_and_restart_starts_afresh(tiny_config_args, tmp_path,
                                                                                       capsys):
    root = tmp_path / "cv"
    args = overrides(tiny_config_args + [f"output_dir={root}", "train.epochs=1"])
    assert main(["cv", "--config", DEMO, "--folds", "2", *args]) == 0
    first = json.loads((root / "cv.json").read_text(encoding="utf-8"))
    capsys.readouterr()
    assert main(["cv", "--config", DEMO, "--folds", "3", *args]) == 2
    assert error_line(capsys) == (f"error: {root} holds a cross-validation made another way (folds: 2 then, 3 now): "
                                  "rerun with its settings to resume it, pass --restart to start it afresh (its "
                                  "results are deleted), or give another output_dir")
    assert main(["cv", "--config", DEMO, "--folds", "2", *args, "-o", "train.optimizer.learning_rate=1e-3"]) == 2
    assert "train.optimizer.learning_rate: 0.003 then, 0.001 now" in error_line(capsys)
    assert json.loads((root / "cv.json").read_text(encoding="utf-8")) == first  # untouched by the refusals
    assert main(["cv", "--config", DEMO, "--folds", "2", *args]) == 0  # the same settings: resumed, nothing rerun
    assert "rows to train" not in capsys.readouterr().out
    assert main(["cv", "--config", DEMO, "--folds", "3", "--restart", *args]) == 0
    assert json.loads((root / "cv.json").read_text(encoding="utf-8"))["folds"] == 3
    assert sorted(p.name for p in root.glob("fold-*")) == ["fold-1", "fold-2", "fold-3"]


@pytest.mark.slow  # two short trainings
def test_a_sweep_rerun_with_another_space_or_other_data_is_refused(tiny_config_args, tmp_path, capsys):
    space, other = tmp_path / "space.yaml", tmp_path / "other.yaml"
    space.write_text(SPACE, encoding="utf-8")
    other.write_text(SPACE.replace("high: 3.0e-3", "high: 9.0e-3"), encoding="utf-8")
    root = tmp_path / "sweep"
    args = overrides(tiny_config_args + [f"output_dir={root}", "train.epochs=1"])
    assert main(["sweep", "--config", DEMO, "--space", str(space), *args]) == 0
    best = (root / "best-config.yaml").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["sweep", "--config", DEMO, "--space", str(other), "--trials", "2", *args]) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: {root} holds a sweep made another way (space params.train.optimizer.learning_rate"
                           ": {") and "'high': 0.003" in line and "'high': 0.009" in line
    write_tsv(tmp_path / "data" / "dev.tsv", synthetic_rows(60, seed=8))
    assert main(["sweep", "--config", DEMO, "--space", str(space), "--trials", "2", *args]) == 2
    assert "(the file of data.dev (its checksum))" in error_line(capsys)
    assert (root / "best-config.yaml").read_text(encoding="utf-8") == best
    assert main(["sweep", "--config", DEMO, "--space", str(other), "--restart", *args]) == 0
    assert sorted(p.name for p in root.glob("trial-*")) == ["trial-0"]  # the old trial went with the old study


@pytest.mark.parametrize("params, fragment", [
    ("  train.no_such_key: {type: categorical, choices: [1, 2]}", "params.train.no_such_key: the value 1 is refused"),
    ("  train.batch_size: {type: categorical, choices: [16, -4]}", "params.train.batch_size: the value -4 is refused"),
    ("  train.warmup: {type: float, low: -1.0, high: 0.5}", "params.train.warmup: the value -1.0 is refused")])
def test_every_value_of_a_space_is_checked_against_the_config_before_trial_0(params, fragment, tiny_config_args,
                                                                             tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(f"sampler: random\ntrials: 2\nparams:\n{params}\n", encoding="utf-8")
    root = tmp_path / "sweep"
    assert main(["sweep", "--config", DEMO, "--space", str(space),
                 *overrides(tiny_config_args + [f"output_dir={root}"])]) == 2
    assert error_line(capsys).startswith(f"error: {space}: {fragment} by the config (config key '")
    assert not root.exists()  # found before anything was written
