"""Issue 44: add-class and remove-class change a prototype head's classes without retraining: the old classes'
logits stay exactly what they were, the new folder says where it came from, and bad input is one line."""
import json

import numpy as np
import paddle
import pytest
from conftest import DEMO, LABELS, NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS, features_of, overrides, tiny_run_args
from test_prototypes import keyword_rows

from paddle_ft.cli import main

NEW_CHARS = "书手机"  # the new class: texts about books and phones, without a mood


@pytest.fixture(scope="module")
def zero_shot(tmp_path_factory):
    root = tmp_path_factory.mktemp("classes")
    from conftest import write_splits, write_vocab

    data = write_splits(root / "data", (8, 60, 60))
    write_vocab(root / "data" / "vocab.txt")
    (root / "labels.tsv").write_text(f"负面\t{NEGATIVE_CHARS}\n正面\t{POSITIVE_CHARS}\n", encoding="utf-8")
    args = [*tiny_run_args(data, data / "vocab.txt", root / "out"), "data.train=null", "model.head=prototype",
            "model.pooling=mean", f"data.label_descriptions={root / 'labels.tsv'}", "train.runtime.write_report=false"]
    assert main(["train", "-c", DEMO, *overrides(args)]) == 0
    return root


def logits(best, rows):
    from paddle_ft.artifacts.bundle import load_bundle
    from paddle_ft.data.features import pad_batch

    bundle = load_bundle(best)
    batch = pad_batch(features_of(rows, bundle.tokenizer), list(range(len(rows))), bundle.tokenizer.pad_token_id)
    return bundle.model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"])).numpy()


def test_add_class_keeps_the_old_logits_and_answers_the_new_class_near_its_examples(zero_shot, tmp_path):
    examples = tmp_path / "new.txt"
    examples.write_text("\n".join(NEW_CHARS * 3 + c for c in NEUTRAL_CHARS[:16]) + "\n", encoding="utf-8")
    assert main(["add-class", "--model", str(zero_shot / "out" / "best"), "--label", "物品", "--examples",
                 str(examples), "--output", str(tmp_path / "added" / "best")]) == 0
    rows = keyword_rows(40, 7)
    before, after = logits(zero_shot / "out" / "best", rows), logits(tmp_path / "added" / "best", rows)
    assert np.abs(before - after[:, :2]).max() <= 1e-5  # an old class's logit of any text is unchanged
    kept = after.argmax(axis=1) != 2
    assert kept.sum() >= 30 and np.array_equal(before.argmax(axis=1)[kept], after.argmax(axis=1)[kept])
    near = logits(tmp_path / "added" / "best", [(NEW_CHARS * 4, "负面")])
    assert near.argmax() == 2
    meta = json.loads((tmp_path / "added" / "best" / "paddle_ft.json").read_text(encoding="utf-8"))
    manifest = json.loads((tmp_path / "added" / "best" / "manifest.json").read_text(encoding="utf-8"))
    assert meta["labels"] == [*LABELS, "物品"] and "metrics" not in manifest
    change = manifest["class_changes"][0]
    assert change["added"] == "物品" and change["examples"]["rows"] == 16
    assert change["from"]["model"] == str(zero_shot / "out" / "best") and len(change["from"]["manifest_sha256"]) == 64
    assert "added 物品" in (tmp_path / "added" / "best" / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert main(["verify", str(tmp_path / "added" / "best")]) == 0

    assert main(["remove-class", "--model", str(tmp_path / "added" / "best"), "--label", "物品", "--output",
                 str(tmp_path / "removed" / "best")]) == 0
    assert np.allclose(logits(tmp_path / "removed" / "best", rows), before, atol=1e-6)


def test_the_new_class_takes_no_more_of_the_reference_rows_than_allowed(zero_shot, tmp_path, capsys):
    """Examples that mix the new class's words with the negative mood: unchecked, their mean would take many
    negative texts; the bias keeps the share of the reference rows it takes to --max-changed."""
    from conftest import write_tsv

    examples = tmp_path / "new.txt"
    examples.write_text("\n".join(NEW_CHARS + NEGATIVE_CHARS[i:i + 3] for i in range(16)) + "\n", encoding="utf-8")
    reference = write_tsv(tmp_path / "reference.tsv", keyword_rows(200, 11))
    taken = {}
    for max_changed in ("0", "0.1"):
        best = tmp_path / f"added-{max_changed}" / "best"
        assert main(["add-class", "--model", str(zero_shot / "out" / "best"), "--label", "物品", "--examples",
                     str(examples), "--reference", str(reference), "--max-changed", max_changed, "--output",
                     str(best)]) == 0
        taken[max_changed] = int((logits(best, keyword_rows(200, 11)).argmax(axis=1) == 2).sum())
        out = capsys.readouterr().out
        assert f"set on {reference}: it answers {taken[max_changed]} of its 200 rows of the old classes" in out
        change = json.loads((best / "manifest.json").read_text(encoding="utf-8"))["class_changes"][0]
        assert change["reference"]["rows"] == 200 and change["reference"]["max_changed"] == float(max_changed)
    card = (tmp_path / "added-0.1" / "best" / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert f"lets it answer at most 10.0% of 200 rows of the other classes in `{reference}`" in card
    assert taken["0"] == 0 and 0 < taken["0.1"] <= 20


def test_without_a_reference_the_model_needs_its_manifests_files(zero_shot, tmp_path, capsys):
    import shutil

    model = tmp_path / "copied"
    shutil.copytree(zero_shot / "out" / "best", model, ignore=shutil.ignore_patterns("manifest.json"))
    assert main(["add-class", "--model", str(model), "--label", "新", "--description", "新的", "--output",
                 str(tmp_path / "new" / "best")]) == 2
    assert ("the model's classes and its manifest names no dev or train file: give --reference FILE (e.g. the "
            "model's dev file)") in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--label", "正面", "--description", "好"], "--label 正面: the model already has that class"),
    (["--label", "新", "--examples", "{blank}"], "holds no character the model reads"),
    (["--label", "新"], "give --examples FILE (texts of the new class), --description TEXT, or both"),
    (["--label", "新", "--description", "\u200b"], "--description: '\\u200b' holds no character the model reads"),
])
def test_bad_add_class_input_is_one_line(zero_shot, tmp_path, capsys, args, message):
    blank = tmp_path / "blank.tsv"
    blank.write_text("text\n\u200b\n", encoding="utf-8")
    args = [a.replace("{blank}", str(blank)) for a in args]
    assert main(["add-class", "--model", str(zero_shot / "out" / "best"), *args, "--output",
                 str(tmp_path / "new" / "best")]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "new" / "best").exists()


def test_a_linear_head_cannot_gain_a_class(tmp_path, capsys):
    from conftest import export_tiny_model

    export_tiny_model(tmp_path / "tiny")
    assert main(["add-class", "--model", str(tmp_path / "tiny" / "best"), "--label", "新", "--description", "新的",
                 "--output", str(tmp_path / "new")]) == 2
    assert "has a linear head, whose classes are learnt together" in capsys.readouterr().err
