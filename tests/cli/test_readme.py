"""README's "Your own data", typed as a new user would: the commands verbatim, in a new folder holding a CSV the
test writes (3 classes, a header, texts with a quoted comma), then the Python lines."""
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from test_init import write_reviews

SECTION = (ROOT / "README.md").read_text(encoding="utf-8").split("## Your own data")[1].split("\n## ")[0]


def test_the_section_shows_init_to_predict_and_the_same_from_python():
    commands = re.search(r"```bash\n(.*?)```", SECTION, re.S).group(1).splitlines()
    assert [c.split()[3] for c in commands] == ["init", "train", "eval", "export", "predict"]
    assert "paddle_ft.train(" in SECTION and "paddle_ft.load(" in SECTION


@pytest.mark.slow
def test_readmes_own_data_commands_work_verbatim(tmp_path):
    for split, rows, seed in (("train", 240, 0), ("dev", 60, 1), ("test", 60, 2)):
        write_reviews(tmp_path / f"{split}.csv", rows, seed)
    commands = re.search(r"```bash\n(.*?)```", SECTION, re.S).group(1).splitlines()
    for command in commands:
        typed = re.sub(r"^python ", f"{sys.executable} ", command)
        done = subprocess.run(typed, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
    assert '"label": "好评"' in done.stdout  # predict's answer for "物流很快，质量很好"
    code = re.search(r"```python\n(.*?)```", SECTION, re.S).group(1)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    accuracy, answer = done.stdout.strip().splitlines()[-2:]
    assert float(accuracy) > 0.9 and "'label': '好评'" in answer
