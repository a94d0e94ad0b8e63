"""`paddle_ft cv`: stratified folds that partition the rows, one resumable run per fold, mean ± std exact."""
import json

import numpy as np
import pytest
from conftest import DEMO, overrides

from paddle_ft.analysis.cv import stratified_folds, summarise
from paddle_ft.data.readers import Columns, Example, read_examples, write_examples


def test_folds_partition_the_rows_and_keep_each_labels_share():
    keys = ["a"] * 30 + ["b"] * 10 + ["a,b"] * 5
    folds = stratified_folds(keys, 5, seed=3)
    assert sorted(np.concatenate(folds).tolist()) == list(range(45))  # every row in exactly one fold
    for fold in folds:
        counts = {key: sum(keys[i] == key for i in fold) for key in ("a", "b", "a,b")}
        assert counts == {"a": 6, "b": 2, "a,b": 1}
    assert [f.tolist() for f in stratified_folds(keys, 5, seed=3)] == [f.tolist() for f in folds]  # seeded


def test_the_summary_is_the_mean_and_sample_std_of_each_metric():
    from paddle_ft.artifacts.run import Results

    runs = [Results(1, "accuracy", 0, {"accuracy": a, "examples": 10}, {"accuracy": t})
            for a, t in ((0.8, 0.7), (0.9, 0.8), (0.7, 0.9))]
    summary = summarise(runs)
    assert summary["dev"]["accuracy"]["mean"] == pytest.approx(0.8)
    assert summary["dev"]["accuracy"]["std"] == pytest.approx(0.1)  # ddof 1
    assert summary["test"]["accuracy"]["folds"] == [0.7, 0.8, 0.9] and "examples" not in summary["dev"]


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl"])
def test_written_examples_read_back_the_same(tmp_path, fmt):
    columns = Columns("text", "second", "labels", ",", allow_no_label=True)
    rows = [Example('好,"评"', "第二", ("a", "b"), 2), Example("差", "再", (), 3)]
    write_examples(tmp_path / f"rows.{fmt}", fmt, columns, rows)
    back, _ = read_examples(tmp_path / f"rows.{fmt}", fmt, columns)
    assert [(e.text, e.text_pair, e.label) for e in back] == [(e.text, e.text_pair, e.label) for e in rows]


@pytest.mark.slow  # three trainings
def test_cross_validation_runs_a_fold_per_run_and_resumes(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main

    args = overrides(tiny_config_args + [f"output_dir={tmp_path / 'cv'}", "train.epochs=1",
                                         "train.runtime.write_report=true"])
    assert main(["cv", "--config", DEMO, "--folds", "3", *args]) == 0
    summary = json.loads((tmp_path / "cv" / "cv.json").read_text(encoding="utf-8"))["summary"]
    folds = [json.loads((tmp_path / "cv" / f"fold-{i}" / "results.json").read_text(encoding="utf-8"))
             for i in (1, 2, 3)]
    assert summary["dev"]["accuracy"]["folds"] == [f["dev"]["accuracy"] for f in folds]
    assert sum(f["dev"]["examples"] for f in folds) == 240 + 60  # train + dev, each row held out once
    assert summary["test"]["accuracy"]["mean"] == pytest.approx(np.mean([f["test"]["accuracy"] for f in folds]))
    assert "| dev | accuracy |" in capsys.readouterr().out
    page = (tmp_path / "cv" / "report.html").read_text(encoding="utf-8")
    mean = summary["dev"]["accuracy"]["mean"]
    assert f"<td>{mean:.4f} ± " in page and page.count('report.html">fold') == 3
    (tmp_path / "cv" / "fold-2" / "results.json").unlink()  # as if stopped during fold 2
    assert main(["cv", "--config", DEMO, "--folds", "3", *args]) == 0
    out = capsys.readouterr().out
    assert "fold 1 of 3: " not in out and "fold 2 of 3: " in out  # finished folds are kept, not run again


# issue 43, root 8: the message names the cause (a label too rare to fold), not a fold file the command wrote
@pytest.mark.parametrize("command", ["cv", "label-issues"])
def test_a_label_with_one_row_is_named_before_any_fold_is_written(command, data_dir, tiny_config_args, tmp_path,
                                                                  capsys):
    from paddle_ft.cli import main

    train = tmp_path / "train.tsv"
    train.write_text((data_dir / "train.tsv").read_text(encoding="utf-8") + "孤零零的一条\t中性\n", encoding="utf-8")
    args = overrides(tiny_config_args + [f"output_dir={tmp_path / 'folds'}", f"data.train={train}", "data.labels=null"])
    output = ["--output", str(tmp_path / "folds")] if command == "label-issues" else []
    assert main([command, "--config", DEMO, "--folds", "3", *args, *output]) == 2
    err = capsys.readouterr().err
    assert "the label '中性' has one row in train and dev" in err and err.count("\n") == 1 and "fold-" not in err
    assert not (tmp_path / "folds" / "folds").exists()


def test_a_budget_the_folds_left_would_overrun_is_refused_before_any_fold(tiny_config_args, tmp_path, capsys,
                                                                        monkeypatch):
    from paddle_ft.cli import main
    from paddle_ft.workflows import cv

    timed = []
    monkeypatch.setattr(cv, "seconds_per_run", lambda path, more, train_rows: timed.append(train_rows) or 600.0)
    args = overrides(tiny_config_args + [f"output_dir={tmp_path / 'cv'}"])
    assert main(["cv", "--config", DEMO, "--folds", "3", "--budget", "25", *args]) == 2
    assert timed == [300 - 100]  # a fold trains on the pool (240 train + 60 dev rows) less its third
    out, err = capsys.readouterr()
    assert "cv: a fold takes about 10 min 00 s here; the 3 left about 30 min 00 s (2 fit in 25 minutes)" in out
    assert err == ("error: --budget 25: the 3 folds left take about 30 min 00 s here, and 2 fit; give more minutes, "
                   "fewer --folds, or a shorter recipe (init --budget)\n")
    assert not list((tmp_path / "cv").glob("fold-*"))
