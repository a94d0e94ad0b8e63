"""Issue 64: one test over every command, so that a new command meets the guards on arrival. Each command module
declares the files it reads of the user's and the paths it writes (`FILES`, commands/flags.Files); for each read, a
corpus of hostile files (bytes that are not UTF-8, a text the model reads as nothing, an empty file, a header alone, a
FIFO, a folder) must be one `error:` line naming the file, never a traceback, a hang or an exit 0 with nothing done;
for each write, what is planted at the path (a link to a file of the user's, a folder or file in the way) must leave
the user's files whole. README's command table and the CLI's registry must agree.

The commands run in this process (main()), on a tiny model trained once; most hostile files are refused before any
work, so the whole table runs in the fast tier."""
from __future__ import annotations

import importlib
import json
import os
import re
import threading
from pathlib import Path

import pytest
from bench.server_process import free_port
from conftest import DEMO, ROOT, overrides, tiny_run_args, write_splits, write_vocab

from paddle_ft.cli import COMMANDS, main
from paddle_ft.commands.flags import Files

HANG_S = 60


def declared(command) -> Files:
    module = importlib.import_module(f"paddle_ft.commands.{command.module}")
    files = getattr(module, "FILES", None)
    assert isinstance(files, Files), f"paddle_ft/commands/{command.module}.py declares no FILES (commands/flags.Files)"
    return files


def test_every_command_declares_what_it_reads_and_writes_and_readme_lists_every_command():
    for command in COMMANDS:
        declared(command)
    table = (ROOT / "README.md").read_text(encoding="utf-8").split("## Commands")[1].split("\n## ")[0]
    cells = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]
    listed = {segment.split()[0] for cell in cells for segment in re.findall(r"`([^`]+)`", cell)} - {"python"}
    assert listed == {command.name for command in COMMANDS}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny prototype-head model trained once (best/ and its export) and the files the commands read."""
    from e5_file import tiny_e5_folder

    root = tmp_path_factory.mktemp("every-command")
    data = write_splits(root / "data", (80, 24, 24))
    vocab = write_vocab(root / "data" / "vocab.txt")
    run = root / "run"
    args = [*tiny_run_args(data, vocab, run), "train.epochs=1", "model.head=prototype", "model.pooling=mean",
            "train.runtime.write_report=false"]
    assert main(["train", "-c", DEMO, *overrides(args)]) == 0
    assert main(["export", "--model", str(run / "best"), "--output", str(root / "export")]) == 0
    (root / "texts.txt").write_text("很好\n太差了\n", encoding="utf-8")
    (root / "labels.tsv").write_text("负面\t顾客不满意的评价\n正面\t顾客满意的评价\n", encoding="utf-8")
    (root / "space.yaml").write_text(WHOLE["yaml"], encoding="utf-8")
    (root / "tasks.json").write_text(json.dumps([
        {"id": 1, "data": {"text": "很好"}, "annotations": [{"result": [
            {"value": {"choices": ["正面"]}, "from_name": "label", "to_name": "text", "type": "choices"}]}]}],
        ensure_ascii=False), encoding="utf-8")
    return {"root": root, "data": data, "run_args": args, "best": run / "best", "export": root / "export",
            "e5": tiny_e5_folder(root)}


def config_run(command: str, world, key: str, path, output: Path, extra=()) -> list[str]:
    """A config-driven command on the tiny recipe, `key` (a data file) set to `path`."""
    args = [*world["run_args"][1:], f"output_dir={output}", f"{key}={path}", "train.max_steps=2"]
    if key == "pretrain.corpus":
        args = [f"output_dir={output}", f"pretrain.corpus=[{path}]", "train.max_steps=2"]
        return [command, "-c", str(ROOT / "configs" / "pretrain-demo.yaml"), *overrides(args)]
    return [command, "-c", DEMO, *overrides(args), *extra]


# (command, what it reads) -> (the kind of file it is, its invocation with that file at `path`, outputs under `out`)
READS = {
    ("init", "--train"): ("table", lambda w, p, out: ["init", "--train", p, "--output-file", out / "x.yaml"]),
    ("init", "--dev"): ("table", lambda w, p, out: ["init", "--train", w["data"] / "train.tsv", "--dev", p,
                                                    "--output-file", out / "x.yaml"]),
    ("init", "--test"): ("table", lambda w, p, out: ["init", "--train", w["data"] / "train.tsv", "--test", p,
                                                     "--output-file", out / "x.yaml"]),
    ("init", "--labels"): ("labels", lambda w, p, out: ["init", "--labels", p, "--backbone", w["e5"],
                                                        "--output-file", out / "x.yaml"]),
    **{(command, key): ("table", lambda w, p, out, command=command, key=key: config_run(
        command, w, key, p, out / "o", {"sweep": ["--space", w["root"] / "space.yaml", "--trials", "1"],
                                        "cv": ["--folds", "2"], "label-issues": ["--output", out / "li"],
                                        "audit": ["--output", out / "audit"],
                                        "distill": ["--teacher", w["best"]]}.get(command, [])))
       for command in ("train", "distill", "audit", "cv", "label-issues", "sweep")
       for key in ("data.train", "data.dev", "data.test")},
    ("sweep", "--space"): ("yaml", lambda w, p, out: config_run("sweep", w, "data.train", w["data"] / "train.tsv",
                                                                out / "o", ["--space", p, "--trials", "1"])),
    ("serve", "--retrain-config"): ("yaml", lambda w, p, out: ["serve", "--export", w["export"], "--port", free_port(),
                                                               "--label-studio", out / "backend",
                                                               "--retrain-config", p]),
    ("pretrain", "pretrain.corpus"): ("texts", lambda w, p, out: config_run("pretrain", w, "pretrain.corpus", p,
                                                                            out / "o")),
    ("export-tasks", "--input"): ("table", lambda w, p, out: ["export-tasks", "--model", w["best"], "--input", p,
                                                              "--to", "doccano", "--output-file", out / "t.jsonl"]),
    ("select-texts", "--pool"): ("table", lambda w, p, out: ["select-texts", "--model", w["best"], "--pool", p,
                                                             "--count", "2", "--to", "doccano", "--output-file",
                                                             out / "t.jsonl"]),
    ("select-texts", "--labelled"): ("texts", lambda w, p, out: [
        "select-texts", "--model", w["best"], "--pool", w["data"] / "test.tsv", "--labelled", p, "--count", "2",
        "--to", "doccano", "--output-file", out / "t.jsonl"]),
    ("import-annotations", "file"): ("json", lambda w, p, out: ["import-annotations", p, "--from", "label-studio",
                                                                "--output-file", out / "rows.tsv"]),
    ("eval", "--data"): ("table", lambda w, p, out: ["eval", "--model", w["best"], "--data", p]),
    ("explain", "--data"): ("table", lambda w, p, out: ["explain", "--model", w["best"], "--text", "很好", "--data", p,
                                                        "--steps", "4"]),
    ("trim-vocab", "--data"): ("table", lambda w, p, out: ["trim-vocab", "--backbone", w["e5"], "--data", p,
                                                           "--output", out / "trimmed"]),
    ("add-class", "--examples"): ("texts", lambda w, p, out: ["add-class", "--model", w["best"], "--label", "中性",
                                                              "--examples", p, "--reference", w["data"] / "dev.tsv",
                                                              "--output", out / "m"]),
    ("add-class", "--reference"): ("table", lambda w, p, out: ["add-class", "--model", w["best"], "--label", "中性",
                                                               "--examples", w["root"] / "texts.txt", "--reference",
                                                               p, "--output", out / "m"]),
    ("export", "--check-precision"): ("table", lambda w, p, out: ["export", "--model", w["best"], "--output",
                                                                  out / "e", "--check-precision", p]),
    ("quantize", "--data"): ("table", lambda w, p, out: ["quantize", "--export", w["export"], "--data", p,
                                                         "--output", out / "q"]),
    ("quantize", "--calibration"): ("texts", lambda w, p, out: [
        "quantize", "--export", w["export"], "--data", w["data"] / "dev.tsv", "--method", "static", "--calibration",
        p, "--output", out / "q"]),
    ("verify", "--data"): ("table", lambda w, p, out: ["verify", w["best"], "--data", p]),
    ("predict", "--input"): ("table", lambda w, p, out: ["predict", "--export", w["export"], "--input", p]),
}

WHOLE = {  # a valid file of each kind, before it is made hostile
    "table": "text\tlabel\n很好很棒\t正面\n太差了\t负面\n",
    "texts": "很好很棒\n太差了\n",
    "labels": "负面\t顾客不满意的评价\n正面\t顾客满意的评价\n",
    "json": json.dumps([{"id": 1, "data": {"text": "很好"}, "annotations": [{"result": [
        {"value": {"choices": ["正面"]}, "from_name": "label", "to_name": "text", "type": "choices"}]}]}],
        ensure_ascii=False),
    "yaml": "trials: 1\nparams:\n  train.optimizer.learning_rate: {type: float, low: 1.0e-4, high: 1.0e-3}\n",
}
SUFFIX = {"table": ".tsv", "texts": ".txt", "labels": ".tsv", "json": ".json", "yaml": ".yaml"}


def _unreadable(kind: str) -> str:
    """A file whose one text the model reads as nothing (zero-width and control characters only)."""
    nothing = "\u200b\u2060\x01"
    return {"table": f"text\tlabel\n很好\t正面\n{nothing}\t负面\n", "texts": f"很好\n{nothing}\n",
            "labels": f"负面\t{nothing}\n正面\t满意\n", "yaml": None,
            "json": WHOLE["json"].replace("很好", nothing.encode("unicode_escape").decode())}[kind]


HOSTILE = {
    "not UTF-8": lambda kind, path: path.write_bytes(WHOLE[kind].replace("很", "é").encode("latin-1", "replace")
                                                     + "差评".encode("gbk")),
    "a text read as nothing": lambda kind, path: path.write_text(_unreadable(kind), encoding="utf-8"),
    "empty": lambda kind, path: path.write_bytes(b""),
    "a header alone": lambda kind, path: path.write_text("text\tlabel\n", encoding="utf-8"),
    "a FIFO": lambda kind, path: os.mkfifo(path),
    "a folder": lambda kind, path: path.mkdir(),
}
NOT_FOR = {"a header alone": {"texts", "labels", "json", "yaml"}, "a text read as nothing": {"yaml"}}


def run(argv) -> int | str | None:
    """main(argv) in a thread (a FIFO read would block it for ever): its exit code, the traceback of what it raised,
    or None when it hung."""
    import traceback

    outcome = []

    def call():
        try:
            outcome.append(main([str(a) for a in argv]))
        except BaseException:  # a traceback a user would see
            outcome.append(traceback.format_exc())

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout=HANG_S)
    return outcome[0] if outcome else None


READ_CASES = [(command, flag, case) for (command, flag), (kind, _) in READS.items() for case in HOSTILE
              if kind not in NOT_FOR.get(case, ())]


def test_every_declared_read_has_a_hostile_case():
    declared_reads = {(c.name, flag) for c in COMMANDS for flag in declared(c).reads}
    assert declared_reads == set(READS), "a command reads a file this test does not run hostile files at"


@pytest.mark.parametrize("command, flag, case", READ_CASES, ids=[f"{c} {f} {h}" for c, f, h in READ_CASES])
def test_a_hostile_file_is_one_line_naming_it(command, flag, case, world, tmp_path, capsys):
    kind, invocation = READS[command, flag]
    path = tmp_path / f"hostile{SUFFIX[kind]}"
    HOSTILE[case](kind, path)
    out = tmp_path / "out"
    out.mkdir()
    code = run(invocation(world, path, out))
    err = capsys.readouterr().err
    assert code is not None, f"{command} {flag}: hung on {case}"
    assert not isinstance(code, str), code
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    # verify's 1 is its verdict: the file is none of the data the model recorded (its bytes are never parsed then)
    assert code in ((1, 2) if command == "verify" else (2,)) and len(errors) == 1 and "Traceback" not in err, err
    assert str(path) in errors[0], errors[0]


# (command, what it writes) -> its invocation writing `target`; "file" or "folder", what the path names
WRITES = {
    ("init", "--output-file"): ("file", lambda w, t: ["init", "--train", w["data"] / "train.tsv", "--output-file", t,
                                                      "-o", "train.max_steps=2"]),
    **{(command, "output_dir"): ("folder", lambda w, t, command=command: config_run(
        command, w, "data.train", w["data"] / "train.tsv", t,
        {"sweep": ["--space", w["root"] / "space.yaml", "--trials", "1"], "cv": ["--folds", "2"],
         "distill": ["--teacher", w["best"]]}.get(command, [])))
       for command in ("train", "distill", "cv", "sweep")},
    ("pretrain", "output_dir"): ("folder", lambda w, t: config_run("pretrain", w, "pretrain.corpus",
                                                                   w["root"] / "texts.txt", t)),
    ("audit", "--output"): ("folder", lambda w, t: config_run("audit", w, "data.train", w["data"] / "train.tsv",
                                                              w["root"] / "unused", ["--output", t])),
    ("label-issues", "--output"): ("folder", lambda w, t: config_run(
        "label-issues", w, "data.train", w["data"] / "train.tsv", w["root"] / "unused", ["--output", t, "--folds",
                                                                                         "2"])),
    ("export-tasks", "--output-file"): ("file", lambda w, t: ["export-tasks", "--model", w["best"], "--input",
                                                              w["root"] / "texts.txt", "--to", "doccano",
                                                              "--output-file", t]),
    ("select-texts", "--output-file"): ("file", lambda w, t: ["select-texts", "--model", w["best"], "--pool",
                                                              w["data"] / "test.tsv", "--count", "2", "--to",
                                                              "doccano", "--output-file", t]),
    ("import-annotations", "--output-file"): ("file", lambda w, t: ["import-annotations", w["root"] / "tasks.json",
                                                                    "--from", "label-studio", "--output-file", t]),
    ("eval", "--errors"): ("file", lambda w, t: ["eval", "--model", w["best"], "--data", w["data"] / "test.tsv",
                                                 "--errors", t]),
    ("explain", "--html"): ("file", lambda w, t: ["explain", "--model", w["best"], "--text", "很好", "--steps", "4",
                                                  "--html", t]),
    ("convert", "--output"): ("folder", lambda w, t: ["convert", "--from-hf", w["e5"], "--output", t]),
    ("trim-vocab", "--output"): ("folder", lambda w, t: ["trim-vocab", "--backbone", w["e5"], "--data",
                                                         w["data"] / "train.tsv", "--output", t]),
    ("add-class", "--output"): ("folder", lambda w, t: ["add-class", "--model", w["best"], "--label", "中性",
                                                        "--examples", w["root"] / "texts.txt", "--reference",
                                                        w["data"] / "dev.tsv", "--output", t]),
    ("remove-class", "--output"): ("folder", lambda w, t: ["remove-class", "--model", w["best"], "--label", "负面",
                                                           "--output", t]),
    ("export", "--output"): ("folder", lambda w, t: ["export", "--model", w["best"], "--output", t, "--no-onnx"]),
    ("quantize", "--output"): ("folder", lambda w, t: ["quantize", "--export", w["export"], "--data",
                                                       w["data"] / "dev.tsv", "--output", t]),
    ("predict", "--output-file"): ("file", lambda w, t: ["predict", "--export", w["export"], "--input",
                                                         w["root"] / "texts.txt", "--output-file", t]),
    # every planted thing is refused before the server listens (a served one would never return)
    ("serve", "--label-studio"): ("folder", lambda w, t: ["serve", "--export", w["export"], "--port", free_port(),
                                                          "--label-studio", t]),
}
# paths a command writes into that it also reads, whose guards have tests of their own: `report RUN` (the run's
# folder, tests/cli/test_ownership.py), `import-annotations --append TRAIN` (the training file it adds to,
# tests/cli/test_labelling.py), `predict --ray --output` (tests/inference/test_predict_ray.py)
ELSEWHERE = {("report", "run_dir"), ("import-annotations", "--append"), ("predict", "--output")}

PLANTED = {
    "file": {
        "a link to a file of yours": lambda target, yours: target.symlink_to(yours),
        "a folder in the way": lambda target, yours: target.mkdir(),
        "a FIFO": lambda target, yours: os.mkfifo(target),
        "a file of yours by that name": lambda target, yours: target.write_text("yours", encoding="utf-8"),
    },
    "folder": {
        "a link to a folder of yours": lambda target, yours: target.symlink_to(yours.parent),
        "a file in the way": lambda target, yours: target.write_text("yours", encoding="utf-8"),
        "a folder holding a file of yours": lambda target, yours: (target.mkdir(),
                                                                   (target / "notes.txt").write_text("yours")),
    },
}
WRITE_CASES = [(command, flag, case) for (command, flag), (kind, _) in WRITES.items() for case in PLANTED[kind]]


def test_every_declared_write_has_planted_cases():
    declared_writes = {(c.name, flag) for c in COMMANDS for flag in declared(c).writes}
    assert declared_writes == set(WRITES) | ELSEWHERE, "a command writes a path this test plants nothing at"


@pytest.mark.parametrize("command, flag, case", WRITE_CASES, ids=[f"{c} {f} {h}" for c, f, h in WRITE_CASES])
def test_what_is_planted_at_an_output_leaves_the_users_files_whole(command, flag, case, world, tmp_path, capsys):
    kind, invocation = WRITES[command, flag]
    mine = tmp_path / "mine"
    mine.mkdir()
    yours = mine / "thesis.txt"
    yours.write_text("years of work", encoding="utf-8")
    target = tmp_path / ("out.yaml" if command == "init" else "out.jsonl" if kind == "file" else "out")
    PLANTED[kind][case](target, yours)
    code = run(invocation(world, target))
    err = capsys.readouterr().err
    assert code is not None, f"{command} {flag}: hung on {case}"
    assert not isinstance(code, str), code
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.txt"] and yours.read_text() == "years of work"
    if case in ("a folder holding a file of yours", "a file in the way", "a file of yours by that name"):
        assert code == 2, f"{command} {flag} replaced {case}"  # refused without --overwrite, and what was there kept
        assert (target / "notes.txt").read_text() == "yours" if target.is_dir() else target.read_text() == "yours"
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 0 or (code == 2 and len(errors) == 1 and str(target) in errors[0]), err
    if code == 0:  # written in place of what was planted, never through it
        assert not target.is_symlink() and (target.is_file() if kind == "file" else target.is_dir())
