"""Nothing lost (issue 27, roots 1 and 2): one owner check and one lock for every folder a command writes, and
every file a command writes put in place whole or not at all."""
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEMO, ROOT, export_tiny_model, overrides, synthetic_rows, write_tsv

from paddle_ft.artifacts.ownership import DESCRIPTIONS, LOCK_FILE, OWNER_FILE, owned_folder, owner_of
from paddle_ft.cli import main
from paddle_ft.errors import UserError
from paddle_ft.io import atomic_file

SPACE = "sampler: random\ntrials: 1\nparams:\n  train.optimizer.learning_rate: {type: float, low: 1.0e-3, high: 3.0e-3}\n"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def commands_into(folder: Path, tiny_config_args: list[str], tmp_path: Path) -> dict[str, list[str]]:
    """Each command that writes a folder, pointed at `folder`."""
    space = tmp_path / "space.yaml"
    space.write_text(SPACE, encoding="utf-8")
    config = overrides([a for a in tiny_config_args if not a.startswith("output_dir=")] + [f"output_dir={folder}"])
    return {"train": ["train", "--config", DEMO, *config],
            "cv": ["cv", "--config", DEMO, "--folds", "2", *config],
            "sweep": ["sweep", "--config", DEMO, "--space", str(space), *config],
            "audit": ["audit", "--config", DEMO, *config, "--output", str(folder)],
            "report": ["report", str(folder)]}


@pytest.mark.parametrize("command, users_file", [("train", "notes.txt"), ("cv", "cv.md"), ("sweep", "sweep.md"),
                                                  ("audit", "audit.json"), ("report", "report.html")])
def test_a_folder_holding_a_users_files_is_refused_and_left_untouched(command, users_file, tiny_config_args,
                                                                       tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / users_file).write_text("my own work", encoding="utf-8")
    if command == "report":  # a folder that looks like a finished run, but no paddle_ft command wrote it
        for name in ("results.json", "config.yaml"):
            (folder / name).write_text("{}", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert main(commands_into(folder, tiny_config_args, tmp_path)[command]) == 2
    line = one_error_line(capsys)
    assert (f"holds files paddle_ft did not write ({users_file}" in line) if command != "report" else \
        "is no folder a paddle_ft command wrote" in line
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # no marker, no lock, nothing


@pytest.mark.parametrize("owner, command", [("cv", "train"), ("sweep", "cv"), ("train", "sweep"), ("train", "audit"),
                                            ("pretrain", "report"), ("audit", "cv")])
def test_a_folder_owned_by_another_kind_of_command_is_refused(owner, command, tiny_config_args, tmp_path, capsys):
    folder = tmp_path / "taken"
    with owned_folder(folder, owner, "--output"):
        (folder / "theirs.json").write_text("{}", encoding="utf-8")
    assert main(commands_into(folder, tiny_config_args, tmp_path)[command]) == 2
    option = "--output" if command == "audit" else "config key 'output_dir':"
    expected = (f"error: {folder} is {DESCRIPTIONS[owner]}; give report the output_dir of a training or distillation "
                "run") if command == "report" else \
        f"error: {option} {folder} holds {DESCRIPTIONS[owner]} (its {OWNER_FILE}); give this {command} its own folder"
    assert one_error_line(capsys) == expected
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE, OWNER_FILE, "theirs.json"]


def test_paddle_ft_sub_folders_do_not_make_a_folder_foreign(tmp_path):
    """audit writes OUT/audit before train writes OUT: the run may start there."""
    with owned_folder(tmp_path / "out" / "audit", "audit", "--output"):
        pass
    with owned_folder(tmp_path / "out", "train", "output_dir"):
        pass
    assert owner_of(tmp_path / "out") == "train" and owner_of(tmp_path / "out" / "audit") == "audit"


HOLD = """
import sys, time
from paddle_ft.artifacts.ownership import owned_folder
with owned_folder(sys.argv[1], "train", "output_dir"):
    print("ready", flush=True)
    time.sleep(60)
"""


def refused_as_busy_while(script: str, folder: Path) -> int:
    """Start `script` on `folder` and, once it prints "ready", check that this process is refused the folder in one
    line naming the script's PID; the script is then killed. Returns its PID."""
    other = subprocess.Popen([sys.executable, "-c", script, str(folder)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert other.stdout.readline().strip() == "ready"
        with pytest.raises(UserError, match=rf"output_dir {folder} is being written by another paddle_ft process "
                                            rf"\(PID {other.pid}\); wait for it"):
            with owned_folder(folder, "train", "output_dir"):
                pass
    finally:
        other.kill()
        other.wait()
    return other.pid


def test_a_folder_in_use_by_a_live_process_is_refused_naming_its_pid_and_a_dead_ones_lock_is_taken_over(
        tmp_path, capsys):
    folder = tmp_path / "run"
    holder = refused_as_busy_while(HOLD, folder)
    with owned_folder(folder, "train", "output_dir"):  # the kernel dropped the dead holder's lock
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert f"took over the lock that process {holder} left" in capsys.readouterr().out
    assert (folder / LOCK_FILE).read_text() == ""  # released in order: no PID left behind


MID_CLAIM = """
import fcntl, os, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
folder.mkdir()
lock = open(folder / ".paddle_ft-lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)
lock.write(f"{os.getpid()}\\n")
lock.flush()
(folder / f"..paddle_ft-owner.tmp-{os.getpid()}").write_text("")
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow  # starts a process that holds the lock
def test_a_folder_another_process_is_claiming_this_instant_is_refused_as_busy_not_foreign(tmp_path):
    """The race CI met: the winner holds the lock and its owner marker is still `.NAME.tmp-PID` (io's atomic write)
    when the loser looks, before taking the lock: the loser must name the winner, not call the marker a user's file."""
    refused_as_busy_while(MID_CLAIM, tmp_path / "run")


def test_the_lock_is_re_entrant_within_a_process(tmp_path):
    """cv and sweep run train on their own sub-folders, and a sweep may run a trial's folder again."""
    with owned_folder(tmp_path / "run", "train", "output_dir"):
        with owned_folder(tmp_path / "run", "train", "output_dir"):
            pass
        assert (tmp_path / "run" / LOCK_FILE).read_text().strip() == str(os.getpid())


def comparable(folder: Path) -> dict[str, bytes]:
    """A run folder's files, less what differs between two equal runs: its own path and name in config.yaml and in
    best/'s card and manifest, speeds and step times in metrics.jsonl, and the report page and VisualDL records, which hold times."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = str(path.relative_to(folder))
        if name.startswith("vdl/") or name == "report.html":
            files[name.split(".")[0]] = b""
        elif name in ("config.yaml", "best/MODEL_CARD.md"):  # the card is titled with the run's name
            files[name] = path.read_bytes().replace(str(folder).encode(), b"OUT").replace(
                f"# Model card: {folder.name}".encode(), b"# Model card: OUT")
        elif name == "best/manifest.json":  # the config in it names the folder; the card's hash follows its title
            manifest = json.loads(path.read_text(encoding="utf-8").replace(str(folder), "OUT"))
            del manifest["files"]["MODEL_CARD.md"]
            files[name] = json.dumps(manifest).encode()
        elif name == "metrics.jsonl":
            events = [json.loads(line) for line in path.read_text().splitlines()]
            files[name] = json.dumps([{k: v for k, v in e.items() if not k.endswith(("_per_s", "_ms_per_step"))}
                                      for e in events]).encode()  # rates and times
        else:
            files[name] = path.read_bytes()
    return files


@pytest.mark.slow  # starts three training processes
def test_two_trainings_started_on_one_folder_at_once_one_runs_the_other_is_refused(tiny_config_args, tmp_path):
    def start(folder: Path) -> subprocess.Popen:
        # 3 epochs: the winner holds the folder for seconds, far longer than the two processes' start-ups differ
        args = [a for a in tiny_config_args if not a.startswith("output_dir=")]
        return subprocess.Popen([sys.executable, str(ROOT / "tools" / "train.py"), "--config", DEMO,
                                 *overrides(args + [f"output_dir={folder}"])],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})

    shared, alone = tmp_path / "shared", tmp_path / "alone"
    first, second = start(shared), start(shared)
    outcomes = [(job.wait(timeout=600), job.communicate()[1], job.pid) for job in (first, second)]
    assert sorted(code for code, _, _ in outcomes) == [0, 2], outcomes
    (_, _, winner), (_, err, _) = sorted(outcomes, key=lambda outcome: outcome[0])
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: config key 'output_dir': {shared} is being written by another paddle_ft process "
                      f"(PID {winner}); wait for it to finish or stop it, or give this train another folder"], err
    assert "Traceback" not in err
    lone = start(alone)
    assert lone.wait(timeout=600) == 0, lone.communicate()[1]
    assert comparable(shared) == comparable(alone)


def full_disk(monkeypatch):
    """Every file paddle_ft writes atomically fails as a full disk would, at its last step."""
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)


def test_a_write_that_fails_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "out.jsonl"
    target.write_text("the previous answers\n", encoding="utf-8")
    full_disk(monkeypatch)
    with pytest.raises(OSError):
        with atomic_file(target) as out:
            out.write("half of the new answers")
    assert target.read_text(encoding="utf-8") == "the previous answers\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


@pytest.mark.parametrize("command", ["predict", "eval"])
def test_on_a_full_disk_predict_and_eval_keep_the_previous_output(command, tmp_path, monkeypatch, capsys):
    export = export_tiny_model(tmp_path / "model")
    data = write_tsv(tmp_path / "test.tsv", synthetic_rows(20, seed=3))
    output = tmp_path / "previous.out"
    output.write_text("kept\n", encoding="utf-8")
    argv = {"predict": ["predict", "--export", str(export), "--input", str(data), "--output-file", str(output),
                        "--overwrite"],
            "eval": ["eval", "--model", str(export.parent / "best"), "--data", str(data), "--errors", str(output),
                     "--overwrite"]}
    full_disk(monkeypatch)
    assert main(argv[command]) == 2
    assert one_error_line(capsys) == f"error: the disk is full writing {output}; free some space, then run the " \
                                     "command again"
    assert output.read_text(encoding="utf-8") == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "previous.out", "test.tsv"]


@pytest.mark.parametrize("command", ["predict", "eval"])
def test_an_output_that_is_the_commands_own_input_is_refused_and_the_input_kept(command, tmp_path, capsys):
    export = export_tiny_model(tmp_path / "model")
    data = write_tsv(tmp_path / "test.tsv", synthetic_rows(20, seed=3))
    before = data.read_bytes()
    argv = {"predict": ["predict", "--export", str(export), "--input", str(data), "--output-file", str(data)],
            "eval": ["eval", "--model", str(export.parent / "best"), "--data", str(data), "--errors", str(data)]}
    assert main([*argv[command], "--overwrite"]) == 2  # even when told to replace what is there
    option, source = {"predict": ("--output-file", "--input"), "eval": ("--errors", "--data")}[command]
    assert one_error_line(capsys) == (f"error: {option} {data} is the {source} file: writing it would replace what is "
                                      "read; choose another path")
    assert data.read_bytes() == before


# issue 43, root 2: every path paddle_ft writes is opened without following a link planted at its name


@pytest.mark.parametrize("planted", ["lock", "metrics"])
def test_a_link_planted_where_training_writes_its_own_file_leaves_the_users_file_whole(planted, tiny_config_args,
                                                                                    tmp_path, capsys):
    users = tmp_path / "thesis.txt"
    users.write_text("years of work", encoding="utf-8")
    run = tmp_path / "out"
    run.mkdir()
    (run / OWNER_FILE).write_text(json.dumps({"kind": "train"}), encoding="utf-8")
    name = LOCK_FILE if planted == "lock" else "metrics.jsonl"
    (run / name).symlink_to(users)
    resume = ["-o", "train.resume=auto"] if planted == "metrics" else []  # a metrics.jsonl is a run begun
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args), *resume]) == 2
    line = one_error_line(capsys)
    assert f"{run / name} is a symbolic link (to {users})" in line and "remove the link" in line
    assert users.read_text(encoding="utf-8") == "years of work"


@pytest.mark.parametrize("planted", ["lock", "metrics"])
@pytest.mark.parametrize("kind", ["hard link", "fifo"])
def test_a_hard_link_or_a_fifo_planted_at_trainings_own_file_is_one_line_and_no_file_is_touched(
        planted, kind, tiny_config_args, tmp_path, capsys):
    """Issue 64, root 6: a hard link at .paddle_ft-lock was truncated (and the user's file with it); a FIFO there
    was a traceback, and at metrics.jsonl a resume that waited for ever."""
    import threading

    users = tmp_path / "thesis.txt"
    users.write_text("years of work", encoding="utf-8")
    run = tmp_path / "out"
    run.mkdir()
    (run / OWNER_FILE).write_text(json.dumps({"kind": "train"}), encoding="utf-8")
    path = run / (LOCK_FILE if planted == "lock" else "metrics.jsonl")
    os.link(users, path) if kind == "hard link" else os.mkfifo(path)
    resume = ["-o", "train.resume=auto"] if planted == "metrics" else []
    outcome = []
    command = threading.Thread(target=lambda: outcome.append(
        main(["train", "--config", DEMO, *overrides(tiny_config_args), *resume])), daemon=True)
    command.start()
    command.join(timeout=60)
    assert outcome == [2], "the command hung or went on"
    line = one_error_line(capsys)
    what = "has 2 names (a hard link" if kind == "hard link" else "is not a regular file (a pipe, a device or a socket)"
    assert f"{path} {what}" in line and "where paddle_ft keeps a file of its own; remove it" in line
    assert users.read_text(encoding="utf-8") == "years of work"


def test_a_lock_path_that_is_a_folder_is_one_line(tiny_config_args, tmp_path, capsys):
    (tmp_path / "out" / LOCK_FILE).mkdir(parents=True)
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args)]) == 2
    assert f"{tmp_path / 'out' / LOCK_FILE} is a folder" in one_error_line(capsys)


def test_an_output_dir_that_is_a_dangling_link_is_one_line(tiny_config_args, tmp_path, capsys):
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    assert main(["train", "--config", DEMO, *overrides(tiny_config_args)]) == 2
    line = one_error_line(capsys)
    assert f"is a symbolic link to {tmp_path / 'gone'}, which does not exist" in line


def test_export_overwrite_onto_a_link_replaces_neither_the_link_nor_the_export_behind_it(tmp_path, capsys):
    export = export_tiny_model(tmp_path / "run")
    before = {p.name: p.read_bytes() for p in export.iterdir()}
    link = tmp_path / "link"
    link.symlink_to(export)
    assert main(["export", "--model", str(tmp_path / "run" / "best"), "--output", str(link), "--overwrite"]) == 2
    assert f"{link} is a symbolic link (to {export})" in one_error_line(capsys)
    assert link.is_symlink() and {p.name: p.read_bytes() for p in export.iterdir()} == before


def test_a_full_disk_during_quantize_names_the_output_not_the_export_copied_from(tmp_path, monkeypatch, capsys):
    # issue 43, root 8: shutil.copy2's error names its source, which the user had no reason to touch
    import shutil

    export = export_tiny_model(tmp_path / "run")
    test = write_tsv(tmp_path / "test.tsv", synthetic_rows(20, seed=2))

    def full(source, target, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(source))

    monkeypatch.setattr(shutil, "copy2", full)
    output = tmp_path / "int8"
    assert main(["quantize", "--export", str(export), "--data", str(test), "--output", str(output)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: the disk is full writing {output};") and str(export) not in line
    assert not output.exists()
