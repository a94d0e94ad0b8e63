"""data.augment: EDA's offline edits on training rows only, seeded, counted in the log."""
from collections import Counter

import pytest
from conftest import DEMO, overrides

from paddle_ft.config import AugmentConfig, load_config
from paddle_ft.data.augment import augmented
from paddle_ft.data.readers import Example
from paddle_ft.errors import ConfigError

ROWS = [Example("这个手机质量很好物流也快", None, "正面", 2), Example("服务太差了再也不买", None, "负面", 3)]


@pytest.mark.parametrize("operation", ["swap", "delete", "insert"])
def test_each_edit_changes_what_it_says_and_keeps_the_label(operation):
    extra = augmented(ROWS, AugmentConfig(copies=3, operations=(operation,), rate=0.2), seed=7)
    assert len(extra) >= 4  # an edit that gives the text back (two swaps that undo each other) adds no row
    for copy in extra:
        row = {2: ROWS[0], 3: ROWS[1]}[copy.line]  # a copy keeps its row's line and label
        assert copy.label == row.label and copy.text != row.text
        cut = max(1, round(0.2 * len(row.text)))
        if operation == "swap":
            assert Counter(copy.text) == Counter(row.text)
        elif operation == "delete":
            assert len(copy.text) == len(row.text) - cut and not Counter(copy.text) - Counter(row.text)
        else:
            assert len(copy.text) == len(row.text) + cut and set(copy.text) == set(row.text)
    assert augmented(ROWS, AugmentConfig(copies=3, operations=(operation,), rate=0.2), seed=7) == extra  # seeded


def test_operations_are_validated_in_one_line():
    with pytest.raises(ConfigError, match="'data.augment.operations' .*a non-empty list of swap, delete, insert"):
        load_config(DEMO, ["data.augment.operations=[synonym]"])


def test_training_rows_are_augmented_and_dev_and_test_are_not(tiny_config_args, data_dir, tmp_path, capsys):
    from paddle_ft.cli import main
    from paddle_ft.data.readers import Columns, read_examples

    args = tiny_config_args + ["data.augment.copies=1", "train.epochs=1"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    rows, _ = read_examples(data_dir / "train.tsv", "tsv", Columns("text", None, "label"))
    expected = len(augmented(rows, AugmentConfig(copies=1), seed=load_config(DEMO).seed))
    assert 230 <= expected <= 240  # an edit that gives the text back adds no row
    out = capsys.readouterr().out
    assert f"augmentation: {expected} edited copies of training rows added (swap, delete, insert; dev and test " \
           "untouched)" in out
    assert f"plan: {240 + expected} training examples" in out
    results = (tmp_path / "out" / "results.json").read_text(encoding="utf-8")
    assert results.count('"examples": 60') == 2  # dev and test kept their 60 rows
