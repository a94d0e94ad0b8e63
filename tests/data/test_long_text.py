"""Long documents: which tokens of a text longer than max_length training keeps, and the exported model keeps
the same ones."""
import json
import random

import numpy as np
import pytest
from conftest import DEMO, NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS, overrides, write_tsv

from paddle_ft.config import load_config
from paddle_ft.errors import ConfigError
from paddle_ft.text import Truncation, pool_windows

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


# a stride wider than a window (a Predictor asked for windows on a model trained otherwise) steps by the window
@pytest.mark.parametrize("stride, starts", [(3, [1, 4, 7]), (4, [1, 5, 9]), (2, [1, 3, 5, 7]), (100, [1, 5, 9])])
def test_sliding_windows_cover_every_token_and_start_stride_apart(stride, starts):
    windows = Truncation("sliding_window", stride=stride).windows(IDS, 6)  # 4 body tokens per window
    assert [w[1] for w in windows] == starts
    assert all(w[0] == 101 and w[-1] == 102 and len(w) <= 6 for w in windows)
    assert windows[-1][-2] == 10 and set().union(*windows) == set(IDS)  # the last token is in the last window
    assert Truncation("sliding_window").windows(IDS, 12) == [IDS]  # a text that fits is one window


def test_windows_pool_into_one_answer_per_text_by_mean_or_max():
    logits = np.array([[1.0, 0.0], [3.0, -2.0], [0.0, 5.0], [2.0, 2.0], [-1.0, 4.0]], dtype=np.float32)
    documents = np.array([0, 0, 1, 2, 2])
    np.testing.assert_array_equal(pool_windows(logits, documents, "mean"), [[2.0, -1.0], [0.0, 5.0], [0.5, 3.0]])
    np.testing.assert_array_equal(pool_windows(logits, documents, "max"), [[3.0, 0.0], [0.0, 5.0], [2.0, 4.0]])


@pytest.mark.parametrize("override, message", [
    (["data.truncation=tail", "data.text_pair_column=second"], "'data.truncation' .*: is tail, but text pairs are cut "
                                                              "longest-first"),
    (["data.truncation=head_tail", "data.head_tokens=126"], r"'data.head_tokens' .*: leaves no room for the tail: "
                                                           r"keep it below max_length - 2 \(126\)"),
    (["data.truncation=sliding_window", "data.stride=127"], r"'data.stride' .*: would skip tokens between windows: "
                                                            r"keep it at most max_length - 2 \(126\)"),
    (["data.truncation=middle"], "expected one of head, tail, head_tail, sliding_window, got 'middle'"),
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


@pytest.mark.slow  # four trainings and exports
def test_only_the_rules_that_keep_the_end_learn_a_label_told_at_the_end(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main
    from paddle_ft.inference.predictor import Predictor

    data = tmp_path / "long"
    data.mkdir()
    for split, n, seed in (("train", 240, 1), ("dev", 60, 2), ("test", 100, 3)):
        write_tsv(data / f"{split}.tsv", ending_rows(n, seed))
    test_rows = ending_rows(100, 3)
    accuracy, exported, windows = {}, {}, {}
    for rule in ("head", "tail", "head_tail", "sliding_window"):
        out = tmp_path / rule
        args = tiny_config_args + [f"output_dir={out}", f"data.train={data / 'train.tsv'}",
                                   f"data.dev={data / 'dev.tsv'}", f"data.test={data / 'test.tsv'}",
                                   f"data.truncation={rule}", "data.head_tokens=20", "data.stride=31",
                                   "data.window_pooling=max",
                                   "train.epochs=4"]
        assert main(["train", "--config", DEMO, *overrides(args)]) == 0
        accuracy[rule] = json.loads((out / "results.json").read_text(encoding="utf-8"))["test"]["accuracy"]
        assert main(["export", "--model", str(out / "best"), "--output", str(out / "export")]) == 0
        predictions = Predictor(out / "export").predict([text for text, _ in test_rows])  # as trained: no option
        exported[rule] = np.mean([p.label == label for p, (_, label) in zip(predictions, test_rows)])
        assert all(p.truncated for p in predictions)
        windows[rule] = {p.windows for p in predictions}
    assert accuracy["head"] < 0.65 and min(accuracy[r] for r in ("tail", "head_tail", "sliding_window")) > 0.95, \
        accuracy
    # 104-164 characters make 104-164 tokens: windows of 62 starting 31 apart
    assert windows["sliding_window"] == {3, 4, 5} and windows["head_tail"] == {1}
    capsys.readouterr()
    text, label = test_rows[0]
    assert main(["predict", "--export", str(tmp_path / "sliding_window" / "export"), "--text", text]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["label"] == label and record["windows"] == len(Truncation("sliding_window", stride=31).windows(
        [0] * (len(text) + 2), 64))
    assert exported == pytest.approx(accuracy, abs=1e-9)  # the exported model cuts as training did


def test_the_key_of_earlier_versions_is_refused_naming_the_new_one(tmp_path):
    """Issue 47: the config said long_text where the metadata, predict and HTTP say truncation; one word now."""
    recipe = tmp_path / "old.yaml"
    recipe.write_text("data:\n  long_text: tail\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"'data.long_text' .*: is now data.truncation \(the same values\): "
                                          r"rename the key"):
        load_config(str(recipe))
