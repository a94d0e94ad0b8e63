"""`paddle_ft sweep`: Optuna trials as normal run folders, a study in SQLite that a stopped sweep resumes to the
same study as an uninterrupted one, the best config written, and a space file checked line by line."""
import json
import re
import sqlite3
import types
from pathlib import Path

import pytest
from conftest import DEMO, overrides

from paddle_ft.errors import UserError

SPACE = """sampler: tpe
trials: 4
pruner: median
params:
  train.optimizer.learning_rate: {type: float, low: 1.0e-3, high: 5.0e-3, log: true}
  train.batch_size: {type: categorical, choices: [16, 32]}
"""


def _study(path):
    """(number, state, params, value) of the finished trials, in the order they finished."""
    with sqlite3.connect(path) as db:
        rows = db.execute("select t.trial_id, t.state, v.value from trials t left join trial_values v "
                          "on v.trial_id = t.trial_id where t.state in ('COMPLETE', 'PRUNED') "
                          "order by t.datetime_complete").fetchall()
        params = {tid: dict(db.execute("select param_name, param_value from trial_params where trial_id = ?",
                                       (tid,)).fetchall()) for tid, _, _ in rows}
    return [(state, params[tid], value) for tid, state, value in rows]


@pytest.mark.slow  # a dozen trainings
def test_a_stopped_sweep_resumes_to_the_study_an_uninterrupted_one_ends_with(tiny_config_args, tmp_path,
                                                                             monkeypatch, capsys):
    from paddle_ft.cli import main
    from paddle_ft.workflows import sweep

    space = tmp_path / "space.yaml"
    space.write_text(SPACE, encoding="utf-8")
    base = tiny_config_args + ["train.epochs=2"]
    assert main(["sweep", "--config", DEMO, "--space", str(space),
                 *overrides(base + [f"output_dir={tmp_path / 'whole'}"])]) == 0
    whole = _study(tmp_path / "whole" / "study.db")
    assert len(whole) == 4 and all(state == "COMPLETE" or state == "PRUNED" for state, _, _ in whole)

    real_run, calls, cut = sweep.training.train, [], {"at_call": None}

    def cut_off_once(config_path, trial_overrides, on_eval):
        calls.append(trial_overrides)
        if len(calls) != cut["at_call"]:
            return real_run(config_path, trial_overrides, on_eval)
        evaluations = []

        def stop_at_the_second(step, value):
            evaluations.append(step)
            if len(evaluations) == 2:  # the first evaluation's checkpoint is on disk
                raise KeyboardInterrupt
            on_eval(step, value)

        return real_run(config_path, trial_overrides, stop_at_the_second)

    monkeypatch.setattr(sweep.training, "train", cut_off_once)
    args = ["sweep", "--config", DEMO, "--space", str(space), *overrides(base + [f"output_dir={tmp_path / 'cut'}"])]
    assert main([*args, "--trials", "1"]) == 0  # stopped between trials
    cut["at_call"] = 3
    assert main(args) == 130  # Ctrl-C: trial 2 runs, trial 3 is cut off after its first checkpoint
    assert main(args) == 0
    assert _study(tmp_path / "cut" / "study.db") == whole
    # the cut-off trial went on from its checkpoint, in its own folder
    assert "train.resume=auto" in calls[3] and calls[3][-2] == calls[2][-1]
    assert "| rank | trial | dev accuracy | state |" in capsys.readouterr().out
    ranked = (tmp_path / "cut" / "sweep.md").read_text(encoding="utf-8").splitlines()
    best = max(value for state, _, value in whole if state == "COMPLETE")
    assert ranked[2].split(" | ")[2] == f"{best:.4f}" and (tmp_path / "cut" / "best-config.yaml").is_file()
    page = (tmp_path / "cut" / "report.html").read_text(encoding="utf-8")
    assert f"<td>{best:.4f}</td>" in page and "href=" not in page
    # the runs write no report page by default: the sweep's names the best trial's run and how to make its page
    best_run = Path(re.search(r"python -m paddle_ft report (\S+) writes its page", page).group(1))
    assert json.loads((best_run / "results.json").read_text(encoding="utf-8"))["dev"]["accuracy"] == best


@pytest.mark.parametrize("text, message", [
    ("params: {}", "needs a params mapping"),
    ("params:\n  a.b: {type: float, low: 2, high: 1}", "params.a.b: give numbers low < high"),
    ("params:\n  a.b: {type: float, low: 0, high: 1, log: true}", "a log range needs low > 0"),
    ("sampler: bayes\nparams:\n  a.b: {type: categorical, choices: [1]}", "sampler is 'bayes'; choose one of tpe"),
    ("sampler: grid\ntrials: 3\nparams:\n  a.b: {type: categorical, choices: [1, 2]}", "the grid has 2 points"),
    ("trails: 3\nparams:\n  a.b: {type: categorical, choices: [1]}", "unknown key trails"),
])
def test_a_bad_space_file_is_one_line(tmp_path, text, message):
    from paddle_ft.analysis.space import load_space

    path = tmp_path / "space.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load_space(path)


def test_a_sweep_never_writes_into_a_training_run(tiny_config_args, tmp_path):
    from paddle_ft.workflows import sweep

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    (run / ".paddle_ft-owner").write_text('{"kind": "train"}', encoding="utf-8")
    space = tmp_path / "space.yaml"
    space.write_text(SPACE, encoding="utf-8")
    with pytest.raises(UserError, match=r"holds a training run \(its .paddle_ft-owner\); give this sweep its own"):
        sweep.sweep(DEMO, [*tiny_config_args, f"output_dir={run}"], str(space))
    assert sorted(p.name for p in run.iterdir()) == [".paddle_ft-owner", "metrics.jsonl"]  # nothing written beside


@pytest.mark.slow  # two trainings
def test_a_budget_stops_the_sweep_before_a_trial_that_would_overrun_it(tiny_config_args, tmp_path, monkeypatch,
                                                                       capsys):
    from paddle_ft.cli import main
    from paddle_ft.workflows import sweep

    space = tmp_path / "space.yaml"
    space.write_text(SPACE, encoding="utf-8")
    args = ["--config", DEMO, "--space", str(space), *overrides(tiny_config_args + ["train.epochs=1",
                                                                                 f"output_dir={tmp_path / 's'}"])]
    monkeypatch.setattr(sweep, "seconds_per_run", lambda path, more: 3600.0)
    assert main(["sweep", "--budget", "30", *args]) == 2
    assert capsys.readouterr().err == ("error: --budget 30: one trial takes about 1 h 00 min here (unpruned); give "
                                       "more minutes, or a shorter recipe (init --budget)\n")
    # the forecast says 1 s a trial, so 3 fit in 3 s; the sweep's clock (a fake) moves 0.4 s at each reading, so a
    # trial takes 0.4 s and after two the next would end at 3.2 s
    readings = iter(0.4 * i for i in range(100))
    monkeypatch.setattr(sweep, "time", types.SimpleNamespace(monotonic=lambda: next(readings)))
    monkeypatch.setattr(sweep, "seconds_per_run", lambda path, more: 1.0)
    assert main(["sweep", "--budget", "0.05", *args]) == 0
    out = capsys.readouterr().out
    assert "sweep: a trial takes about 1.0 s here, unpruned: 3 of the 4 left fit in 0.05 minutes" in out
    assert "sweep: stopping at 2 of 4 trials: the next would take about 0.4 s, beyond --budget 0.05" in out, out
    assert len(_study(tmp_path / "s" / "study.db")) == 2
