"""Long documents: which tokens of a text longer than max_length training keeps, and the exported model keeps
the same ones."""
import json
import random

import numpy as np
import pytest

from paddle_ft.config import load_config
from paddle_ft.data.features import Truncation
from paddle_ft.errors import ConfigError
from conftest import DEMO, NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS, overrides, write_tsv

IDS = [101, *range(1, 11), 102]  # [CLS] 1..10 [SEP]


@pytest.mark.parametrize("rule, kept", [
    (Truncation("head"), [1, 2, 3, 4, 5, 6]),
    (Truncation("tail"), [5, 6, 7, 8, 9, 10]),
    (Truncation("head_tail", head_tokens=2), [1, 2, 7, 8, 9, 10]),
    (Truncation("head_tail", head_tokens=5), [1, 2, 3, 4, 5, 10]),
])
def test_each_rule_keeps_its_tokens_and_the_specials(rule, kept):
    assert rule.cut(IDS, 8) == [101, *kept, 102]
    assert rule.cut(IDS, 12) == IDS and rule.cut(IDS, 20) == IDS  # a text that fits is never cut


@pytest.mark.parametrize("override, message", [
    (["data.long_text=tail", "data.text_pair_column=second"], "'data.long_text' .*: is tail, but text pairs are cut "
                                                              "longest-first"),
    (["data.long_text=head_tail", "data.head_tokens=126"], r"'data.head_tokens' .*: leaves no room for the tail: "
                                                           r"keep it below max_length - 2 \(126\)"),
    (["data.long_text=middle"], "expected one of head, tail, head_tail, got 'middle'"),
])
def test_long_text_keys_are_validated_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(DEMO, override)


def ending_rows(n: int, seed: int) -> list[tuple[str, str]]:
    """Texts of 100-160 neutral characters whose label is told only by their last 4 characters."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = ("负面", "正面")[i % 2]
        mood = POSITIVE_CHARS if label == "正面" else NEGATIVE_CHARS
        body = "".join(rng.choice(NEUTRAL_CHARS) for _ in range(rng.randint(100, 160)))
        rows.append((body + "".join(rng.choice(mood) for _ in range(4)), label))
    return rows


def test_only_the_rules_that_keep_the_end_learn_a_label_told_at_the_end(tiny_config_args, tmp_path):
    from paddle_ft.cli import main
    from paddle_ft.infer import Predictor

    data = tmp_path / "long"
    data.mkdir()
    for split, n, seed in (("train", 240, 1), ("dev", 60, 2), ("test", 100, 3)):
        write_tsv(data / f"{split}.tsv", ending_rows(n, seed))
    test_rows = ending_rows(100, 3)
    accuracy, exported = {}, {}
    for rule in ("head", "tail", "head_tail"):
        out = tmp_path / rule
        args = tiny_config_args + [f"output_dir={out}", f"data.train={data / 'train.tsv'}",
                                   f"data.dev={data / 'dev.tsv'}", f"data.test={data / 'test.tsv'}",
                                   f"data.long_text={rule}", "data.head_tokens=20", "train.epochs=4"]
        assert main(["train", "--config", DEMO, *overrides(args)]) == 0
        accuracy[rule] = json.loads((out / "results.json").read_text(encoding="utf-8"))["test"]["accuracy"]
        assert main(["export", "--model", str(out / "best"), "--output", str(out / "export")]) == 0
        predictions = Predictor(out / "export").predict([text for text, _ in test_rows])  # as trained: no option
        exported[rule] = np.mean([p.label == label for p, (_, label) in zip(predictions, test_rows)])
        assert all(p.truncated for p in predictions)
    assert accuracy["head"] < 0.65 and accuracy["tail"] > 0.95 and accuracy["head_tail"] > 0.95, accuracy
    assert exported == pytest.approx(accuracy, abs=1e-9)  # the exported model cuts as training did
