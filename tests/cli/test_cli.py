"""The real tools, run as a user runs them: train -> eval -> export -> predict, and bad input."""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEMO, ROOT, overrides, write_tsv

from paddle_ft.artifacts.run import RunFiles
from paddle_ft.cli import main

# Mean training loss over steps 26-30 of the tiny run below (seed 42); the tolerance absorbs
# thread-count and CPU-kernel differences between machines, not behaviour changes.
PINNED_LOSS_STEP_30 = 0.4421


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / f"{name}.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0]


@pytest.mark.slow
def test_train_eval_export_predict_end_to_end(tiny_config_args, tmp_path):
    out = tmp_path / "out"
    trained = tool("train", "--config", DEMO, *overrides(tiny_config_args))
    assert trained.returncode == 0, trained.stderr
    for name in ("config.yaml", "label_map.json", "metrics.jsonl", "results.json", "best/model_state.pdparams",
                 "best/vocab.txt", "best/label_map.json", "best/paddle_ft.json"):
        assert (out / name).is_file(), name
    assert any((out / "vdl").iterdir())
    assert json.loads((out / "label_map.json").read_text(encoding="utf-8")) == {"负面": 0, "正面": 1}
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    losses = {e["step"]: e["loss"] for e in events if e["event"] == "train"}
    assert sorted(losses) == [5, 10, 15, 20, 25, 30, 35, 40, 45]  # 240 rows / 16 = 15 steps per epoch, 3 epochs
    assert losses[30] == pytest.approx(PINNED_LOSS_STEP_30, abs=2e-3)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["test"]["examples"] == 60 and results["test"]["accuracy"] > 0.9

    evaluated = tool("eval", "--model", str(out / "best"), "--data", str(tmp_path / "data" / "test.tsv"))
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert report["accuracy"] == pytest.approx(results["test"]["accuracy"])
    wrong = Path(report["misclassified_file"]).read_text(encoding="utf-8").splitlines()
    assert wrong[0] == "line\ttext\tgold\tpredicted\tscore"
    assert len(wrong) - 1 == round((1 - report["accuracy"]) * 60)

    exported = tool("export", "--model", str(out / "best"), "--output", str(out / "export"))
    assert exported.returncode == 0, exported.stderr
    assert json.loads((out / "export" / "export.json").read_text())["parity_max_abs_diff"] < 1e-4

    texts = tmp_path / "texts.txt"
    texts.write_text("好好棒赞\n差差烂糟\n", encoding="utf-8")
    predicted = tool("predict", "--export", str(out / "export"), "--input", str(texts),
                     "--output-file", str(tmp_path / "p.jsonl"))
    assert predicted.returncode == 0, predicted.stderr
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    fields = ["label", "line", "probabilities", "score", "text", "truncated", "windows"]
    assert [sorted(r) for r in rows] == [fields] * 2
    assert [(r["text"], r["label"]) for r in rows] == [("好好棒赞", "正面"), ("差差烂糟", "负面")]

    again = tool("train", "--config", DEMO, *overrides(tiny_config_args))
    assert_one_line_error(again, "already holds a training run")


@pytest.mark.slow
def test_bad_config_key_is_one_line_without_traceback(tiny_config_args):
    result = tool("train", "--config", DEMO, *overrides(tiny_config_args + ["train.batchsize=8"]))
    assert_one_line_error(result, "config key 'train.batchsize' (from -o): unknown key")


@pytest.mark.slow
def test_bad_row_is_one_line_naming_file_and_line(tiny_config_args, tmp_path):
    bad = write_tsv(tmp_path / "bad.tsv", [("好", "正面"), ("差", "中性")])
    result = tool("train", "--config", DEMO, *overrides(tiny_config_args + [f"data.train={bad}"]))
    assert_one_line_error(result, f"{bad}:3: label '中性' is not one of")


@pytest.mark.slow
def test_module_entry_point_reports_errors_the_same_way():
    result = subprocess.run([sys.executable, "-m", "paddle_ft", "predict", "--export", "/nonexistent", "--text", "好"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert_one_line_error(result, "/nonexistent holds no exported model")


@pytest.mark.parametrize("argv, fragment", [
    # (the output under /nonexistent too: a fixed path in /tmp could be anyone's file)
    (["export", "--model", "/nonexistent/best", "--output", "/nonexistent/export"], "is not a paddle_ft model directory"),
    (["predict", "--export", "/nonexistent", "--text", "好"], "holds no exported model"),
    (["eval", "--model", "/nonexistent/best", "--data", "x.tsv"], "is not a paddle_ft model directory"),
    (["train", "--config", "/nonexistent.yaml"], "does not exist"),
])
def test_commands_report_user_errors_in_one_line(argv, fragment, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_the_pinned_loss_in_process(tiny_config_args, tmp_path, capsys):
    """The fast tier's hold on the numbers: the tiny run of the end-to-end test, in this process, logs the pinned
    loss at step 30 (the end-to-end test checks the same through tools/train.py)."""
    assert main(["train", "-c", DEMO, *overrides(tiny_config_args + ["data.test=null"])]) == 0
    losses = {e.step: e.values["loss"] for e in RunFiles(tmp_path / "out").read_events("train")}
    assert losses[30] == pytest.approx(PINNED_LOSS_STEP_30, abs=2e-3)
    # issue 62: a run writes its metrics and model card; the report page is one command (or one key) away
    assert not (tmp_path / "out" / "report.html").exists()
    assert f"the run's page: python -m paddle_ft report {tmp_path / 'out'}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, old, new, what", [
    (["predict", "--model-dir", "out/export", "--text", "好"], "--model-dir", "--export", "DIR"),
    (["serve", "--model-dir", "out/export"], "--model-dir", "--export", "DIR"),
    (["quantize", "--model", "out/export", "--data", "t.tsv", "--output", "o"], "--model", "--export", "DIR"),
    # issue 62: --output names a folder everywhere, --output-file a file
    (["init", "--train", "t.tsv", "--output", "my.yaml"], "--output", "--output-file", "FILE"),
    (["export-tasks", "--model", "m", "--input", "t.txt", "--to", "doccano", "--output", "t.jsonl"], "--output",
     "--output-file", "FILE"),
    (["import-annotations", "e.json", "--from", "doccano", "--output", "x.tsv"], "--output", "--output-file", "FILE"),
    # issue 63: --budget is minutes (init, cv, sweep); select-texts' number of texts is --count
    (["select-texts", "--model", "m", "--pool", "p.txt", "--budget", "8", "--to", "doccano", "--output-file",
      "t.jsonl"], "--budget", "--count", "N"),
])
def test_a_flag_of_the_old_names_is_refused_naming_the_new_one(argv, old, new, what, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: paddle_ft {argv[0]}: {old} is now {new}: give {new} {what}")


@pytest.mark.parametrize("old, new", [("select", "select-texts"), ("import", "import-annotations")])
def test_a_command_of_an_old_name_is_refused_in_one_line_naming_the_new_one(old, new, capsys):
    assert main([old, "--model", "out/best"]) == 2
    assert capsys.readouterr().err == (f"error: the command {old} is now {new}: python -m paddle_ft {new} --model "
                                       "out/best\n")


def test_predict_writes_a_file_with_output_file_and_a_folder_with_output_and_ray(tmp_path, capsys):
    assert main(["predict", "--export", "e", "--text", "好", "--output", str(tmp_path / "p.jsonl")]) == 2
    assert capsys.readouterr().err == ("error: --output is a folder, with --ray; give --output-file FILE for the "
                                       "answers\n")
    assert main(["predict", "--export", "e", "--input", "a.tsv", "--ray", "--output-file", "p.jsonl"]) == 2
    assert capsys.readouterr().err == ("error: with --ray the answers go to shards in a folder: give --output DIR, "
                                       "not --output-file\n")


def test_every_flag_has_one_meaning_across_the_commands():
    """--model is a trained model folder and --export an export folder wherever they appear; every command with a
    recipe takes -c/--config and -o; predict and serve declare the predictor's flags identically."""
    from paddle_ft.cli import parser

    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    flags = {name: {o: a for a in command._actions for o in a.option_strings if a.help != argparse.SUPPRESS}
             for name, command in commands.items()}
    for name, options in flags.items():
        if "--model" in options:
            assert "OUT/best" in options["--model"].help, name
        if "--export" in options:
            assert "export folder" in options["--export"].help, name
        if "--config" in options:
            assert options["-c"] is options["--config"] and options["-o"].dest == "override", name
    assert {n for n, o in flags.items() if "--export" in o} == {"predict", "serve", "quantize"}
    assert {n for n, o in flags.items() if "--model" in o} == {"eval", "export", "explain", "add-class", "remove-class",
                                                                   "export-tasks", "select-texts"}
    # issue 62: --output is a folder wherever it appears, --output-file a file
    assert all("folder" in o["--output"].help and o["--output"].metavar in (None, "DIR")
               for o in flags.values() if "--output" in o)
    assert {n for n, o in flags.items() if "--output-file" in o} == {"init", "predict", "export-tasks", "select-texts",
                                                                     "import-annotations"}
    assert all(o["--output-file"].metavar == "FILE" for o in flags.values() if "--output-file" in o)
    shared = ("--device", "--gpu-id", "--threads", "--precision", "--tensorrt", "--backend", "--truncation")
    for flag in shared:
        a, b = flags["predict"][flag], flags["serve"][flag]
        assert (a.choices, a.default, a.type, a.help) == (b.choices, b.default, b.type, b.help), flag


def test_unwritable_output_dir_fails_before_training(tiny_config_args, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + [f"output_dir={blocker}/out"])]) == 2
    assert "config key 'output_dir'" in capsys.readouterr().err


def test_predict_on_a_long_input_shows_progress_and_answers_as_in_one_call(tmp_path, capsys):
    """Without a terminal (a log, CI), a line with the elapsed time and ETA as the work goes, not silence."""
    from conftest import export_tiny_model, synthetic_rows

    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.inference.predictor import Predictor

    export = export_tiny_model(tmp_path / "model")
    texts = [text for text, _ in synthetic_rows(2100, seed=9)]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "texts.txt"), "--output-file",
                 str(tmp_path / "p.jsonl"), "--threads", "1"]) == 0
    said = capsys.readouterr().out
    assert "predict: 1024/2100, elapsed " in said and "predict: 2100/2100, elapsed " in said and "ETA" in said
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    alone = Predictor(export, PredictOptions(cpu_threads=1)).predict(texts)
    assert [r["label"] for r in rows] == [p.label for p in alone]
    assert max(abs(r["score"] - round(p.score, 6)) for r, p in zip(rows, alone)) < 1e-5
    # answers on standard output: the progress goes to standard error, apart from them
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "texts.txt"), "--threads", "1"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["label"] for line in out.splitlines()] == [p.label for p in alone]
    assert "predict: 2100/2100, elapsed " in err


def test_eval_on_a_long_file_shows_progress(tmp_path, capsys):
    from conftest import export_tiny_model, synthetic_rows

    export = export_tiny_model(tmp_path / "model")
    data = write_tsv(tmp_path / "long.tsv", synthetic_rows(2100, seed=4))
    capsys.readouterr()
    assert main(["eval", "--model", str(export.parent / "best"), "--data", str(data)]) == 0
    out, err = capsys.readouterr()
    assert "eval: 2100/2100, elapsed " in err and json.loads(out)["examples"] == 2100  # stdout: the report alone


@pytest.mark.slow  # a fresh interpreter
def test_predict_without_ray_never_imports_it(tmp_path):
    from conftest import export_tiny_model

    export = export_tiny_model(tmp_path / "model")
    (tmp_path / "a.txt").write_text("质量很好\n", encoding="utf-8")
    code = ("import sys; from paddle_ft.cli import main; "
            f"assert main(['predict', '--export', {str(export)!r}, '--input', {str(tmp_path / 'a.txt')!r}]) == 0; "
            "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules), 'ray was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_ray_options_need_ray(tmp_path, capsys):
    from conftest import export_tiny_model

    export = export_tiny_model(tmp_path / "model")
    (tmp_path / "a.txt").write_text("质量很好\n", encoding="utf-8")
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "a.txt"), "--merge"]) == 2
    assert capsys.readouterr().err == "error: --merge goes with --ray\n"
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "*.txt")]) == 2
    assert "predict reads one --input file; for many (or a glob pattern), add --ray" in capsys.readouterr().err


def test_predict_on_bad_row_skip_leaves_out_the_bad_rows_and_names_them(tmp_path, capsys):
    from conftest import export_tiny_model

    export = export_tiny_model(tmp_path / "model")
    rows = [f"质量很好{i}" for i in range(40)]
    rows[3], rows[17] = "\x01\x02", "好\t坏"  # a text the model reads as nothing; a row of two fields
    path = tmp_path / "in.tsv"
    path.write_text("text\n" + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    assert main(["predict", "--export", str(export), "--input", str(path)]) == 2
    err = capsys.readouterr().err  # the first bad row stops the reading, and the error names the option
    assert f"{path}:5: " in err and "(fix the row, or use --on-bad-row skip to drop bad rows)" in err
    assert main(["predict", "--export", str(export), "--input", str(path), "--on-bad-row", "skip"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["line"] for line in out.splitlines()] == [n for n in range(2, 42) if n not in (5, 19)]
    assert f"predict: left out 2 bad rows of {path} (line 5: the text in column 'text' holds no character" in err \
        and "line 19: " in err


def test_a_ray_run_refused_for_a_bad_row_records_nothing_a_fixed_rerun_would_trip_on(tmp_path, capsys):
    from conftest import export_tiny_model

    export = export_tiny_model(tmp_path / "model")
    path = tmp_path / "in.tsv"
    path.write_text("text\n好\n好\t坏\n", encoding="utf-8")
    assert main(["predict", "--export", str(export), "--input", str(path), "--output", str(tmp_path / "out"),
                 "--ray"]) == 2
    assert f"{path}:3: " in capsys.readouterr().err
    assert not (tmp_path / "out" / "predict-fingerprint.json").exists()  # fixing the file is not "another way"


def test_the_top_level_help_names_every_command_and_cuts_no_sentence(capsys):
    # issue 43, root 11: the description was the module docstring's first line, cut mid-list
    from paddle_ft.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    description = out.split("positional arguments:")[0].split("\n\n", 1)[1]
    assert " ".join(description.split()).endswith("Every command takes --help.")
    for command in ("init", "train", "trim-vocab", "export", "predict", "serve"):
        assert f"\n    {command} " in out


def test_the_command_reference_in_docs_is_generated_from_the_parsers():
    """Issue 47: docs/commands.md listed 12 of 18 commands; now their flags come from the parsers themselves."""
    import runpy

    from conftest import ROOT

    tool = runpy.run_path(str(ROOT / "tools" / "command_reference.py"))
    document = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert tool["with_reference"](document) == document, \
        "docs/commands.md is stale: python tools/command_reference.py --write"


def test_every_command_is_one_module_and_one_wrapper_named_after_it_and_reachable_from_both():
    """Issue 62: a command's module in paddle_ft/commands and its tools/ wrapper are its name with "_" for "-" (no
    module holds two commands, none is reached through a name built from a prefix)."""
    from conftest import ROOT

    from paddle_ft.cli import COMMANDS

    modules = {p.stem for p in (ROOT / "paddle_ft" / "commands").glob("*.py")} - {"__init__", "flags"}
    assert modules == {command.name.replace("-", "_") for command in COMMANDS}
    for command in COMMANDS:
        wrapper = ROOT / "tools" / f"{command.name.replace('-', '_')}.py"
        assert wrapper.is_file(), f"{command.name} has no tools/ wrapper"
        assert f'main(["{command.name}", *sys.argv[1:]])' in wrapper.read_text(encoding="utf-8"), wrapper
        with pytest.raises(SystemExit) as exit:
            main([command.name, "--help"])
        assert exit.value.code == 0, command.name


def test_every_command_of_readmes_table_exists_and_every_test_docs_name_exists():
    """Issue 47: of 13 doc claims checked, 4 were false, among them a renamed test in docs/guarantees.md."""
    import re

    from conftest import ROOT

    from paddle_ft.cli import COMMANDS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| command | what it does |"):].split("\n\n")[0]
    named = {re.match(r"(python tools/\S+|[a-z-]+)", cell).group(1)
             for row in table.splitlines()[2:] for cell in re.findall(r"`([^`]+)`", row.split(" | ")[0])}
    known = {c.name for c in COMMANDS}
    assert named - known == {"python tools/bench.py"} and (ROOT / "tools" / "bench.py").is_file()
    assert known - named == set(), "commands README's table leaves out"
    tests = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py")}
    guarantees = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    checked, file = 0, None
    # `test_x.py::test_y`, then `::test_z` of the same file; a bare `test_x.py` is the file the next `::` are in
    for module, name, same_file in re.findall(r"`(?:[\w/]*/)?(test_\w+\.py)(?:::(test_\w+))?|`::(test_\w+)",
                                              guarantees):
        file, name = module or file, name or same_file
        assert file in tests, f"docs/guarantees.md names {file}, which does not exist"
        if name:
            assert re.search(rf"^def {name}\(", tests[file], re.M), f"docs/guarantees.md names {file}::{name}"
            checked += 1
    assert checked >= 40


def test_a_ray_runs_fingerprint_holds_every_option_that_changes_a_row(tmp_path):
    """--top-k came with the one answer format: a rerun with another would have resumed shards without it."""
    from dataclasses import replace

    from conftest import export_tiny_model

    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.workflows.predict_ray import RayJob, work_of

    export = export_tiny_model(tmp_path / "model")
    files = [write_tsv(tmp_path / "in.tsv", [("好", "正面")])]
    base = PredictOptions()
    work = work_of(export, files, base, RayJob(), "error")
    for change in ({"top_k": 2}, {"truncation": "tail"}, {"abstain_below": 0.9}, {"precision": "bf16"},
                   {"backend": "paddle"}):
        assert work_of(export, files, replace(base, **change), RayJob(), "error") != work, change
    assert work_of(export, files, replace(base, cpu_threads=1, batch_size=8), RayJob(), "error") == work


def test_the_suites_size_and_time_are_stated_in_one_place_only():
    """Issue 62: README said make test took 11 minutes, docs/status.md 9, docs/development.md "about 630 tests" of 886:
    the figures now live in docs/development.md alone, as a dated measurement; nothing else restates them."""
    import re

    from conftest import ROOT

    claim = re.compile(r"(make test|test-fast|test suite|the suite)[^.\n]{0,80}?\b\d+(\.\d+)?\s*(min|minutes|s)\b"
                       r"|\b\d{3,}\s+tests\b", re.I)
    places = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]
    stated = {path.name: match.group(0) for path in places if path.name != "development.md"
              for match in [claim.search(path.read_text(encoding="utf-8"))] if match}
    assert stated == {}
    assert claim.search((ROOT / "docs" / "development.md").read_text(encoding="utf-8"))  # it does see a figure


def test_every_command_line_the_docs_show_uses_flags_its_command_has():
    """docs/commands.md showed `select-texts --budget N` long after the flag became --count: a hand-written line is
    held to the parser as the generated reference is."""
    import argparse
    import re

    from conftest import ROOT

    from paddle_ft.cli import parser

    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    stale = []
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in document.read_text(encoding="utf-8").splitlines():
            shown = re.match(r"\s*(?:\$ )?python -m paddle_ft ([a-z-]+)\b(.*)", line)
            if not shown or shown[1] not in commands:
                continue
            flags = {option for action in commands[shown[1]]._actions for option in action.option_strings
                     if action.help != argparse.SUPPRESS}  # a renamed flag is refused, naming its new name
            stale += [f"{document.name}: {shown[1]} {flag}" for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*",
                                                                                     shown[2].split("#")[0])
                      if flag not in flags]
    assert stale == []
