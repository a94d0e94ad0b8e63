"""Every bench tool takes its `--output` as paddle_ft's commands take theirs (tools/bench/folder.py): a folder
holding a user's files is refused in one line, untouched, before the bench writes or replaces anything in it."""
import subprocess
import sys
from pathlib import Path

import pytest
from bench.folder import bench_output

from paddle_ft.artifacts.ownership import owner_of

ROOT = Path(__file__).resolve().parents[2]


def test_a_bench_owns_a_new_folder_and_refuses_a_users(tmp_path, capsys):
    with bench_output(tmp_path / "new") as folder:
        assert folder == (tmp_path / "new").resolve() and owner_of(folder) == "bench"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        with bench_output(tmp_path / "mine"):
            pytest.fail("a user's folder was taken")
    assert refused.value.code == 2  # as a paddle_ft command exits on a user's mistake
    assert capsys.readouterr().err == (f"error: --output {tmp_path / 'mine'} holds files paddle_ft did not write "
                                       "(notes.txt); give a new or empty folder, so that nothing of yours is "
                                       "overwritten\n")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("tool, arguments", [
    ("few_shot_bench.py", []), ("active_learning_bench.py", []), ("hierarchy_bench.py", []),
    ("many_labels_bench.py", []), ("precision_bench.py", []),
    ("label_noise.py", ["--config", "configs/demo-tiny.yaml"])])
def test_each_bench_tool_refuses_a_folder_of_the_users_in_one_line(tool, arguments, tmp_path):
    (tmp_path / "notes.txt").write_text("keep me", encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / tool), *arguments, "--output", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"error: --output {tmp_path} holds files paddle_ft did not write "
                                                "(notes.txt); give a new or empty folder, so that nothing of yours is "
                                                "overwritten"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
