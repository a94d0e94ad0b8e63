"""Issue 64, root 4: a command's outputs are claimed for the process that writes them. Two add-class (or two
exports) into one --output both exited 0 with one model lost; export-tasks replaced a user's .label_config.xml that
it named after --output-file."""
import os
import subprocess
import sys
import time

import pytest
from conftest import export_tiny_model

from paddle_ft.cli import main
from paddle_ft.errors import UserError
from paddle_ft.io import claimed, is_claim, new_output_folder


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_claimed_output_is_refused_to_a_second_process_naming_its_pid_and_a_dead_ones_claim_is_taken(tmp_path):
    target = tmp_path / "model"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from paddle_ft.io import claimed\n"
        f"with claimed({str(target)!r}, '--output'):\n    print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"^--output {target} is being written by another paddle_ft process "
                                            rf"\(PID {holder.pid}\); wait for it to finish, or give another path$"):
            with claimed(target, "--output"):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert [p.name for p in tmp_path.iterdir()] == [".model.claim"]  # what the killed process left
    with claimed(target, "--output"):  # taken over: its holder is gone
        pass
    assert list(tmp_path.iterdir()) == [] and is_claim(".model.claim") and is_claim(".model.claim-12")


def test_a_new_output_folder_is_checked_again_under_the_claim(tmp_path):
    """What was checked before minutes of work (new or empty) must still hold when the result is written: another
    process may have written the folder meanwhile."""
    target = tmp_path / "model"
    with new_output_folder(target, "--output", "write it into a new folder"):
        pass  # still new: fine
    target.mkdir()
    (target / "model_state.pdparams").write_bytes(b"another process's model")
    with pytest.raises(UserError, match=rf"^--output {target} already exists and is not empty; write it into a new "
                                        "folder$"):
        with new_output_folder(target, "--output", "write it into a new folder"):
            pytest.fail("the block ran")


@pytest.mark.slow
def test_two_exports_into_one_folder_at_once_one_is_written_the_other_refused(tmp_path):
    export = export_tiny_model(tmp_path / "model")
    best, target = export.parent / "best", tmp_path / "twice"
    command = [sys.executable, "-m", "paddle_ft", "export", "--model", str(best), "--output", str(target),
               "--no-onnx"]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / ".twice.claim").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    second = subprocess.run(command, stderr=subprocess.PIPE, text=True)
    first_err = first.communicate()[1]
    assert sorted([first.returncode, second.returncode]) == [0, 2], (first_err, second.stderr)
    refused = second.stderr if second.returncode == 2 else first_err
    assert "is being written by another paddle_ft process" in refused or "already holds an export" in refused
    assert (target / "export.json").is_file() and not (tmp_path / ".twice.claim").exists()


def test_export_tasks_never_replaces_a_label_config_it_did_not_write(tmp_path, capsys):
    export = export_tiny_model(tmp_path / "model")
    texts = tmp_path / "texts.txt"
    texts.write_text("很好\n太差\n", encoding="utf-8")
    users = tmp_path / "user.label_config.xml"
    users.write_text("<View><!-- my project's config --></View>\n", encoding="utf-8")
    args = ["export-tasks", "--model", str(export.parent / "best"), "--input", str(texts), "--to", "label-studio",
            "--output-file", str(tmp_path / "user.json")]
    assert main(args) == 2
    assert f"its labelling config goes to {users}, which holds a file paddle_ft did not write" in \
        one_error_line(capsys)
    assert users.read_text(encoding="utf-8") == "<View><!-- my project's config --></View>\n"
    assert not (tmp_path / "user.json").exists()
    os.remove(users)
    assert main(args) == 0 and users.read_text(encoding="utf-8").startswith("<View>\n  <Text")
    assert main(args) == 2  # the tasks file exists now: replaced only when told
    assert main([*args, "--overwrite"]) == 0  # and then its own config, from the earlier run, with it


def test_a_file_output_that_exists_is_replaced_only_when_told(tmp_path, capsys):
    """A second run into the same name replaced the first's answers, and a user's file of that name, without a word;
    eval's default file, beside the model, is paddle_ft's own and replaced at each eval."""
    export = export_tiny_model(tmp_path / "model")
    data = tmp_path / "test.tsv"
    data.write_text("text\tlabel\n好\t正面\n差\t负面\n", encoding="utf-8")
    mine = tmp_path / "mine.tsv"
    mine.write_text("years of work", encoding="utf-8")
    best = export.parent / "best"
    assert main(["eval", "--model", str(best), "--data", str(data), "--errors", str(mine)]) == 2
    assert one_error_line(capsys) == f"error: --errors {mine} already exists; pass --overwrite to replace it, or " \
                                     "give another path"
    assert mine.read_text(encoding="utf-8") == "years of work"
    assert main(["eval", "--model", str(best), "--data", str(data), "--errors", str(mine), "--overwrite"]) == 0
    assert mine.read_text(encoding="utf-8").startswith("line\ttext\tgold\tpredicted")
    for _ in range(2):  # the default file is replaced each time
        assert main(["eval", "--model", str(best), "--data", str(data)]) == 0


def test_a_file_at_the_claims_name_that_paddle_ft_did_not_write_is_refused_not_deleted(tmp_path):
    marker = tmp_path / ".model.claim"
    marker.write_text("my notes", encoding="utf-8")
    with pytest.raises(UserError, match=rf"cannot claim it \({marker} is in the way\); remove that file$"):
        with claimed(tmp_path / "model", "--output"):
            pytest.fail("the block ran")
    assert marker.read_text(encoding="utf-8") == "my notes"
