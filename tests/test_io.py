"""Nothing lost: atomic folders and their crash recovery, output-path guards, and exports that never
delete what they did not write (issue 9, groups 1 and 5)."""
import os
import subprocess
import sys

import pytest
from conftest import export_tiny_model

from paddle_ft.cli import main
from paddle_ft.errors import UserError
from paddle_ft.io import atomic_directory, check_output_file, check_output_folder, recover_leftovers


def test_atomic_directory_replaces_only_when_the_block_finishes(tmp_path):
    final = tmp_path / "best"
    with atomic_directory(final) as tmp:
        (tmp / "w").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_directory(final) as tmp:
            (tmp / "w").write_text("2")
            raise RuntimeError("crash")
    assert (final / "w").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["best"]


def test_atomic_directory_refuses_a_file_and_leaves_it_alone(tmp_path):
    target = tmp_path / "export"
    target.write_text("my notes")
    with pytest.raises(UserError, match="is a file"):
        with atomic_directory(target):
            pass
    assert target.read_text() == "my notes" and [p.name for p in tmp_path.iterdir()] == ["export"]


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_recovery_puts_back_a_folder_whose_replacement_was_cut_short(tmp_path):
    pid = dead_pid()
    (tmp_path / f".best.old-{pid}").mkdir()  # killed between final -> .old and .tmp -> final
    (tmp_path / f".best.old-{pid}" / "w").write_text("previous best")
    (tmp_path / f".best.tmp-{pid}").mkdir()
    (tmp_path / f".step-8.tmp-{pid}").mkdir()  # killed while writing a checkpoint
    messages = []
    recover_leftovers(tmp_path, messages.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert (tmp_path / "best" / "w").read_text() == "previous best"
    assert len(messages) == 3


def test_recovery_drops_an_old_copy_once_the_new_one_is_in_place_and_spares_live_writers(tmp_path):
    pid = dead_pid()
    (tmp_path / "best").mkdir()
    (tmp_path / f".best.old-{pid}").mkdir()
    (tmp_path / f".best.tmp-{os.getppid()}").mkdir()  # a live process is still writing it
    (tmp_path / ".hidden-user-folder").mkdir()  # not ours: never touched
    recover_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".best.tmp-{os.getppid()}", ".hidden-user-folder", "best"]


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p.mkdir(), "is a folder; give a file path"),
    (lambda p: None, "does not exist; create the folder"),
])
def test_output_file_guard(tmp_path, make, fragment):
    target = tmp_path / "out.tsv" if fragment.startswith("is a folder") else tmp_path / "missing" / "out.tsv"
    make(target)
    with pytest.raises(UserError, match=fragment):
        check_output_file(target, "--errors")


def test_output_folder_guard_tries_the_parent_for_real(tmp_path):
    with pytest.raises(UserError, match=r"^--output /proc/paddle_ft/export cannot be created there"):
        check_output_folder("/proc/paddle_ft/export", "--output")  # root may write anywhere, but not there
    check_output_folder(tmp_path / "a" / "b" / "export", "--output")
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []


def test_output_folder_guard_names_the_file_in_the_way(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"--output .*/f/export: .*/f is a file"):
        check_output_folder(tmp_path / "f" / "export", "--output")
    with pytest.raises(UserError, match="is a file; give a folder path"):
        check_output_folder(tmp_path / "f", "--output")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A folder shaped like a training run: best/ (a real model) beside the run's own files."""
    run = tmp_path_factory.mktemp("run")
    export_tiny_model(run)  # writes run/best and run/export
    for name in ("metrics.jsonl", "results.json", "config.yaml"):
        (run / name).write_text("{}")
    (run / "checkpoints" / "step-4").mkdir(parents=True)
    return run


def snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*"))


@pytest.mark.parametrize("output, fragment", [
    ("{run}", "would replace the model folder"),
    ("{run}/..", "would replace the model folder"),
    ("{run}/best", "would replace the model folder"),
    ("{run}/checkpoints", "holds other files and no export"),
    ("{run}/metrics.jsonl", "is a file; give a folder path"),
    ("{run}/metrics.jsonl/export", "is a file, so nothing can be created under it"),
    ("{run}/export", "already holds an export; pass --overwrite"),
])
def test_export_refuses_any_output_it_would_have_to_delete(trained_run, output, fragment, capsys):
    before = snapshot(trained_run)
    assert main(["export", "--model", str(trained_run / "best"), "--output", output.format(run=trained_run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --output") and fragment in err and err.count("\n") == 1
    assert snapshot(trained_run) == before


def test_overwrite_replaces_an_earlier_export_only(trained_run, tmp_path, capsys):
    export = trained_run / "export"
    assert main(["export", "--model", str(trained_run / "best"), "--output", str(export), "--overwrite"]) == 0
    (export / "notes.txt").write_text("mine")
    assert main(["export", "--model", str(trained_run / "best"), "--output", str(export), "--overwrite"]) == 2
    assert "files it did not write (notes.txt)" in capsys.readouterr().err
    assert (export / "notes.txt").read_text() == "mine"
    (export / "notes.txt").unlink()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", "--model", str(trained_run / "best"), "--output", str(empty)]) == 0


def test_a_hashing_writer_hashes_small_and_large_blocks_in_their_order(tmp_path):
    """Blocks of 1 MiB and more are hashed on a thread while written, smaller ones inline: the digest is the file's."""
    import hashlib

    from paddle_ft.io import HashingWriter

    blocks = [b"a" * 10, bytes(range(256)) * 8192, b"b" * 65536, memoryview(b"c" * (3 << 20)), b"d"]
    with open(tmp_path / "f", "wb") as handle:
        writer = HashingWriter(handle)
        assert [writer.write(block) for block in blocks] == [len(bytes(block)) for block in blocks]
        writer.close()
    assert writer.hexdigest() == hashlib.sha256((tmp_path / "f").read_bytes()).hexdigest()
