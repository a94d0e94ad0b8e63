"""The training report, opened in a real headless browser (Debian's Chromium): it loads without console
messages, every picture loads and has content, and the numbers on the page are results.json's."""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import DEMO, overrides

from paddle_ft.analysis.report import confusion_matrix

pytestmark = pytest.mark.slow  # trains a model and starts a browser


def test_confusion_matrix_counts_gold_rows_against_predicted_columns():
    matrix = confusion_matrix(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 1, 0]), 2)
    assert matrix.tolist() == [[1, 1], [1, 2]]


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium (.ci/run does: apt-get install chromium)")
        pytest.skip("needs Chromium (Debian: apt-get install chromium), as CI installs it")
    return browser


def _browse(browser: str, page, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *flags, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def test_the_report_renders_in_a_browser_with_the_numbers_of_results_json(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main

    browser = _chromium()
    args = tiny_config_args + ["train.epochs=2", "train.decision.target_coverage=0.8", "train.runtime.write_report=true"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    run = tmp_path / "out"
    page, results = run / "report.html", json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert f"and {page}" in capsys.readouterr().out  # written at the end of training

    loaded = _browse(browser, page, "--dump-dom")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert ":CONSOLE" not in loaded.stderr, [line for line in loaded.stderr.splitlines() if ":CONSOLE" in line]
    body = re.search(r"<body[^>]*>", loaded.stdout).group(0)
    # curves, confusion, reliability, risk-coverage
    assert 'data-images="4"' in body and 'data-images-loaded="4"' in body
    shown = dict(re.findall(r'data-metric="([^"]+)">([0-9.]+)<', loaded.stdout))
    for split in ("dev", "test"):
        for metric in ("accuracy", "macro_f1", "ece"):
            assert shown[f"{split}.{metric}"] == f"{results[split][metric]:.4f}"
    for name, row in results["test"]["per_class"].items():
        assert shown[f"test.per_class.{name}.recall"] == f"{row['recall']:.4f}"
    assert shown["test.ece_page"] == f"{results['test']['ece']:.4f}"  # the diagram's ECE is test's
    for name in ("abstain_below", "coverage", "answered_accuracy"):
        assert shown[f"test.{name}"] == f"{results['test']['decision'][name]:.4f}"

    from matplotlib.image import imread

    for picture in (run / "report").glob("*.png"):
        assert imread(picture)[..., :3].std() > 0.05, picture  # not a blank canvas
    shot = _browse(browser, page, "--window-size=1300,2400", f"--screenshot={tmp_path / 'page.png'}")
    assert shot.returncode == 0 and imread(tmp_path / "page.png")[..., :3].std() > 0.05


def test_report_of_a_folder_that_is_not_a_finished_run_is_one_line(tmp_path, capsys):
    from paddle_ft.cli import main

    from paddle_ft.artifacts.ownership import owned_folder

    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path} is no folder a paddle_ft command wrote; give report the output_dir of a training or " \
           "distillation run" in capsys.readouterr().err
    with owned_folder(tmp_path / "run", "train", "output_dir"):  # a run that never began
        pass
    assert main(["report", str(tmp_path / "run")]) == 2
    assert "is not a finished training run" in capsys.readouterr().err


def test_a_stopped_run_is_reported_as_far_as_it_went(tiny_config_args, tmp_path, capsys):
    """Issue 63: a stopped run's best/ worked everywhere, but report refused it. Its page now shows the curves so far
    and the best model so far (the evaluation best/ holds), marked partial; before its first evaluation, one line."""
    from paddle_ft.cli import main

    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + ["train.epochs=2"])]) == 0
    run = tmp_path / "out"
    (run / "results.json").unlink()  # as a run stopped after its second evaluation leaves it
    evaluations = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
                   if '"event": "eval"' in line]
    best = max(evaluations, key=lambda e: e["accuracy"])
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    assert (f"this run stopped at step {evaluations[-1]['step']} before its end" in page
            and f"best model so far (step {best['step']}, by dev accuracy)" in page)
    assert f'data-metric="dev.accuracy">{best["accuracy"]:.4f}<' in page and "test.accuracy" not in page
    assert (run / "report" / "curves.png").is_file()
    shutil.rmtree(run / "best")  # stopped before its first evaluation saved a model
    assert main(["report", str(run)]) == 2
    assert capsys.readouterr().err == (f"error: {run} stopped before its first evaluation saved a model: there is "
                                       "nothing to report on yet; resume it with -o train.resume=auto\n")


def test_the_confusion_matrix_names_classes_in_a_font_that_draws_them(monkeypatch):
    from matplotlib import font_manager

    from paddle_ft.analysis.report import font_for

    assert font_for(("negative", "positive")) == "sans-serif"  # any font draws ASCII names
    without = [f for f in font_manager.fontManager.ttflist if not any(m in f.name for m in ("CJK", "WenQuanYi"))]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", without)
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *args, **kwargs: [])  # none on disk either
    assert font_for(("负面", "正面")) is None  # then class ids, which the page names, and says how to get names
    from paddle_ft.analysis.report import Answers, _answers_section

    answers = Answers("test", ["好", "差"], np.array([0, 1]), np.array([[0.9, 0.1], [0.2, 0.8]]), ("负面", "正面"), [])
    section = _answers_section(answers, {"confusion": "c.png", "reliability": "r.png"}, 0.1)
    assert "Classes: 0 = 负面, 1 = 正面. No font on this machine draws these names" in section
    assert "apt-get install fonts-noto-cjk" in section
    fake = font_manager.FontEntry(fname="/nonexistent/NotoSansCJK.ttc", name="Noto Sans CJK JP")
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [*without, fake])
    assert font_for(("负面", "正面")) == "Noto Sans CJK JP"


def test_the_config_section_lists_what_differs_from_the_defaults():
    from conftest import DEMO

    from paddle_ft.analysis.report import changed_keys
    from paddle_ft.config import load_config

    from paddle_ft.config import Config

    changed = changed_keys(load_config(DEMO, ["train.epochs=7", f"seed={Config().seed}"]))
    assert changed["train.epochs"] == (7, Config().train.epochs)
    assert "seed" not in changed  # set, but to the default
    assert all(value != default for value, default in changed.values()) and len(changed) > 5


def test_a_cjk_font_installed_after_matplotlibs_cache_was_built_is_found(monkeypatch, tmp_path):
    # issue 43, root 11: fonts-noto-cjk installed after the first plot is missing from matplotlib's cached list
    import shutil

    from matplotlib import font_manager

    from paddle_ft.analysis.report import font_for

    without = [f for f in font_manager.fontManager.ttflist if not any(m in f.name for m in ("CJK", "WenQuanYi"))]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", list(without))
    # a font file on disk the cache does not list (a stand-in: DejaVu's file under a CJK font's file name)
    installed = shutil.copy(font_manager.findfont("DejaVu Sans"), tmp_path / "NotoSansCJK-Regular.ttf")
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *args, **kwargs: [str(installed)])
    assert font_for(("负面", "正面")) == "DejaVu Sans"  # the family its file declares, now known to matplotlib
    assert str(installed) in {f.fname for f in font_manager.fontManager.ttflist}


def test_the_curves_of_a_short_run_mark_their_points(tmp_path, monkeypatch):
    """Issue 63: a run of two logged steps drew a line through two points, which a reader does not see; up to
    SHORT_RUN logged steps each point is marked, past it the curves are plain lines."""
    from paddle_ft.analysis import report
    from paddle_ft.artifacts.run import Event

    drawn = []
    monkeypatch.setattr(report, "_save", lambda figure, path: drawn.append(figure) or path.name)
    for steps in (2, report.SHORT_RUN + 1):
        events = [Event("train", step, {"loss": 1.0 / step, "lr": 1e-3}) for step in range(1, steps + 1)]
        report._curves([*events, Event("eval", steps, {"accuracy": 0.5})], "accuracy", tmp_path / "curves.png")
    short, long = ([line.get_marker() for axes in figure.axes[:2] for line in axes.get_lines()] for figure in drawn)
    assert short == ["o", "o"] and long == ["None", "None"]
