"""label-issues: rows flipped on purpose are found (precision at k and recall), --prune gives back the accuracy the
flips cost, and the review file, once decided, is read back by training through data.corrections."""
import json
import random

import numpy as np
import pytest

from conftest import DEMO, LABELS, overrides, synthetic_rows, tiny_run_args, write_splits, write_tsv, write_vocab
from paddle_ft.analysis.label_issues import find_label_issues
from paddle_ft.workflows.build import read_dataset
from paddle_ft.cli import main
from paddle_ft.config import load_config
from paddle_ft.errors import DataError


def test_confident_learning_flags_the_rows_whose_given_label_the_model_doubts():
    rng = np.random.default_rng(0)
    gold = np.arange(200) % 2
    confident = np.clip(rng.normal(0.9, 0.05, 200), 0.6, 0.99)  # the model's probability of the true label
    probabilities = np.stack([np.where(gold == 0, confident, 1 - confident),
                              np.where(gold == 1, confident, 1 - confident)], axis=1)
    noisy = gold.copy()
    noisy[[3, 50, 101, 150]] = 1 - noisy[[3, 50, 101, 150]]
    issues = find_label_issues(noisy, probabilities, ("a", "b"))
    assert sorted(i.row for i in issues) == [3, 50, 101, 150]
    assert [i.given_probability for i in issues] == sorted(i.given_probability for i in issues)  # lowest first
    first = issues[0]
    assert first.suggested == (("a", "b")[gold[first.row]],) and first.given != first.suggested
    assert first.confidence == pytest.approx(probabilities[first.row].max())


def test_multi_label_issues_name_the_label_set_the_model_suggests():
    gold = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]] * 40)
    probabilities = np.where(gold == 1, 0.95, 0.03)
    wrong = gold.copy()
    wrong[7] = [1, 1, 0]  # row 7 is [0, 1, 0]; given an extra label "a"
    issues = find_label_issues(wrong, probabilities, ("a", "b", "c"), multi_label=True)
    assert [i.row for i in issues] == [7]
    assert issues[0].given == ("a", "b") and issues[0].suggested == ("b",)


@pytest.mark.slow  # eight tiny trainings: four folds, then every row and without the flagged
def test_flipped_labels_are_found_and_pruning_them_gives_back_accuracy(tmp_path, capsys):
    data = write_splits(tmp_path / "data", (400, 100, 200))
    rows = synthetic_rows(400, seed=1)
    flipped = set(random.Random(7).sample(range(400), 120))  # 30%: enough that memorising them costs accuracy
    write_tsv(data / "train.tsv", [(text, LABELS[1 - LABELS.index(label)] if i in flipped else label)
                                   for i, (text, label) in enumerate(rows)])
    args = [*tiny_run_args(data, write_vocab(tmp_path / "vocab.txt"), tmp_path / "unused"), "train.epochs=6",
            "train.runtime.log_every=100"]
    output = tmp_path / "issues"
    assert main(["label-issues", "--config", DEMO, "--folds", "4", "--output", str(output), "--prune",
                 *overrides(args)]) == 0
    table = [line.split("\t") for line in (output / "label_issues.tsv").read_text(encoding="utf-8").splitlines()]
    assert table[0] == ["rank", "file", "line", "given", "suggested", "confidence", "given_probability", "text"]
    train_rows = [int(r[2]) - 2 for r in table[1:] if r[1] == str(data / "train.tsv")]  # line 2 is row 0
    k = len(flipped)
    precision_at_k, recall = len(set(train_rows[:k]) & flipped) / k, len(set(train_rows) & flipped) / k
    # each fold's model is ~97% right on clean rows (the clean corpus trains to 0.97-0.99), so a flipped row's given
    # label gets a low probability unless that model errs on the row itself (~3%), and a clean row is flagged only
    # where it errs: measured 0.975 and 0.975; 0.85 leaves room for a weaker fold, not for a broken method
    assert precision_at_k >= 0.85 and recall >= 0.85, (precision_at_k, recall)
    summary = json.loads((output / "label_issues.json").read_text(encoding="utf-8"))
    # six epochs memorise the flips (0.94 measured against 0.985 without them)
    assert summary["prune"]["pruned"]["accuracy"] >= summary["prune"]["all_rows"]["accuracy"] + 0.02, summary
    assert summary["flagged"] == len(table) - 1 and summary["rows"] == 500
    assert "label-issues: " in capsys.readouterr().out
    # issue 43, root 9: the folds' own report pages are left out unless asked (--fold-reports)
    assert (output / "fold-1" / "results.json").is_file() and not list(output.glob("fold-*/report.html"))
    # the review file, every suggestion accepted, is read back by training
    review = output / "review.tsv"
    lines = review.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "file\tline\ttext\tlabel\tsuggested\tconfidence\tdecision"
    review.write_text("\n".join([lines[0], *(line + "accept" for line in lines[1:])]) + "\n", encoding="utf-8")
    config = load_config(DEMO, [*args, f"data.corrections={review}"])
    labels = [e.label for e in read_dataset(config.data).examples["train"]]
    # two labels: accepting a suggestion flips the row back if it was flipped, and away if it was not
    flagged = set(train_rows)
    expected = 400 - len(flipped - flagged) - len(flagged - flipped)
    assert sum(given == clean for given, (_, clean) in zip(labels, rows)) == expected


# ----------------------------------------------------------------------------- data.corrections

@pytest.fixture
def reviewed(tmp_path):
    """(data folder, a review file whose rows name train lines 2-6 with the decisions given)"""
    data = write_splits(tmp_path / "data", (20, 10, 10))

    def review(decisions: list[str], texts: list[str] | None = None, file=None) -> str:
        rows = [line.split("\t") for line in (data / "train.tsv").read_text(encoding="utf-8").splitlines()[1:6]]
        texts = texts or [text for text, _ in rows]
        lines = ["file\tline\ttext\tlabel\tsuggested\tconfidence\tdecision"] + [
            f"{file or data / 'train.tsv'}\t{n}\t{text}\t{label}\t{LABELS[1 - LABELS.index(label)]}\t0.9\t{d}"
            for n, (text, (_, label), d) in enumerate(zip(texts, rows, decisions), start=2)]
        path = tmp_path / "review.tsv"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return str(path)

    return data, review


def _read(data, review):
    config = load_config(DEMO, [f"data.train={data / 'train.tsv'}", f"data.dev={data / 'dev.tsv'}",
                                f"data.test={data / 'test.tsv'}", f"data.corrections={review}"])
    return read_dataset(config.data).examples


def test_each_decision_does_what_it_says(reviewed, capsys):
    data, review = reviewed
    before = [e.label for e in _read(data, review([""] * 5))["train"]]
    capsys.readouterr()
    decided = review(["accept", "drop", "keep", "", LABELS[0]])
    after = _read(data, decided)["train"]
    relabelled = 1 + (before[4] != LABELS[0])  # the last decision names a label the row may already have
    assert f"data.corrections: {relabelled} rows relabelled and 1 dropped, as {decided}" in capsys.readouterr().out
    assert len(after) == 19 and [e.line for e in after[:4]] == [2, 4, 5, 6]
    assert after[0].label != before[0] and after[1].label == before[2] and after[2].label == before[3]
    assert after[3].label == LABELS[0]


@pytest.mark.parametrize("change, message", [
    (lambda review: review(["maybe"] + [""] * 4), "review.tsv:2: decision 'maybe': 'maybe' is not a label "
                                                  "(正面, 负面); write keep, accept, drop or a label"),
    (lambda review: review(["accept"] + [""] * 4, texts=["改过的文本"] * 5),
     "review.tsv:2: {train}:2 no longer holds the text reviewed (the data changed since label-issues ran): run "
     "label-issues again"),
    (lambda review: review(["drop"] + [""] * 4, file="other.tsv"),
     "review.tsv:2: names other.tsv, which is neither data.train nor data.dev of this config"),
])
def test_a_correction_that_does_not_fit_is_one_line_naming_the_review_row(reviewed, change, message):
    data, review = reviewed
    with pytest.raises(DataError) as caught:
        _read(data, change(review))
    assert message.format(train=data / "train.tsv") in str(caught.value)
    assert "\n" not in str(caught.value)


# issue 43, root 6: a review file is checked as a whole, not read as a lookup table
def test_two_decisions_for_one_row_are_refused_naming_both_lines(reviewed):
    data, review = reviewed
    path = review(["drop", "", "", "", ""])
    lines = open(path, encoding="utf-8").read().splitlines()
    second = lines[1].rsplit("\t", 1)[0] + "\taccept"  # the same row again, decided otherwise
    open(path, "w", encoding="utf-8").write("\n".join(lines + [second]) + "\n")
    with pytest.raises(DataError, match=f"review.tsv:7: reviews {data / 'train.tsv'}:2 a second time \\(first on "
                                        "line 2\\); keep one decision per row"):
        _read(data, path)


def test_a_review_file_of_a_run_that_flagged_nothing_changes_nothing(reviewed, tmp_path, capsys):
    data, _ = reviewed
    empty = tmp_path / "empty-review.tsv"
    empty.write_text("file\tline\ttext\tlabel\tsuggested\tconfidence\tdecision\n", encoding="utf-8")
    assert len(_read(data, empty)["train"]) == 20
    assert "data.corrections: 0 rows relabelled and 0 dropped" in capsys.readouterr().out


def test_a_linear_probe_scores_each_row_by_a_fit_that_did_not_see_it():
    from paddle_ft.analysis.linear_probe import out_of_fold_probabilities

    rng = np.random.default_rng(0)
    gold = np.arange(300) % 3
    vectors = np.eye(3)[gold] + rng.normal(0, 0.2, (300, 3))
    given = gold.copy()
    given[[5, 100, 200]] = (gold[[5, 100, 200]] + 1) % 3  # flipped: its own fold's probe never saw the flip
    folds = [np.arange(i, 300, 4) for i in range(4)]
    probabilities = out_of_fold_probabilities(vectors, given, folds, multi_label=False)
    assert probabilities.shape == (300, 3) and np.allclose(probabilities.sum(axis=1), 1)
    assert (probabilities.argmax(axis=1) == gold).mean() > 0.97
    assert all(probabilities[row, given[row]] < 0.1 for row in (5, 100, 200))
    multi = out_of_fold_probabilities(vectors, np.eye(3)[given], folds, multi_label=True)
    assert (multi.argmax(axis=1) == gold).mean() > 0.97


@pytest.mark.slow  # five tiny trainings: the encoder, then the fine-tuned folds
def test_the_frozen_encoders_probe_finds_the_flips_the_fine_tuned_folds_find(tmp_path, capsys):
    """The cheap path (one forward pass, a logistic regression per fold) against the expensive one (K fine-tunings)
    on a case small enough to run both, from an encoder that learnt the task's kind of text first, as a pretrained
    one has (a random encoder's vectors say nothing): the same planted flips found."""
    data = write_splits(tmp_path / "data", (400, 100, 200))
    vocab = write_vocab(tmp_path / "vocab.txt")
    encoder = tmp_path / "encoder"
    assert main(["train", "--config", DEMO, *overrides(tiny_run_args(data, vocab, encoder))]) == 0
    rows = synthetic_rows(400, seed=1)
    flipped = set(random.Random(7).sample(range(400), 40))  # 10%
    write_tsv(data / "train.tsv", [(text, LABELS[1 - LABELS.index(label)] if i in flipped else label)
                                   for i, (text, label) in enumerate(rows)])
    args = overrides([*tiny_run_args(data, vocab, tmp_path / "unused"), f"model.backbone={encoder / 'best'}",
                      "model.scratch=null", "train.epochs=6", "train.runtime.log_every=100"])
    found = {}
    for method in ("embeddings", "fine-tune"):
        output = tmp_path / method
        assert main(["label-issues", "--config", DEMO, "--folds", "4", "--output", str(output), "--method", method,
                     *args]) == 0
        table = [line.split("\t") for line in (output / "label_issues.tsv").read_text(encoding="utf-8").splitlines()]
        assert json.loads((output / "label_issues.json").read_text(encoding="utf-8"))["method"] == method
        found[method] = {int(r[2]) - 2 for r in table[1:] if r[1] == str(data / "train.tsv")}
    for method, rows_found in found.items():  # measured: recall 1.0 and precision 0.976 both ways
        recall, precision = len(rows_found & flipped) / len(flipped), len(rows_found & flipped) / len(rows_found)
        assert recall >= 0.9 and precision >= 0.9, (method, recall, precision)
    both, either = found["embeddings"] & found["fine-tune"], found["embeddings"] | found["fine-tune"]
    assert len(both) >= 0.9 * len(either), found  # measured: the same 41 rows


def test_auto_fine_tunes_a_small_encoders_folds_and_probes_a_large_ones(tmp_path, capsys):
    from paddle_ft.workflows.label_issues import FINE_TUNE_UP_TO, _chosen

    small = load_config(DEMO, ["model.scratch.num_layers=2", "model.scratch.hidden_size=128",
                               "model.scratch.intermediate_size=512"])
    large = load_config(DEMO, ["model.scratch.num_layers=12", "model.scratch.hidden_size=384",
                               "model.scratch.intermediate_size=1536"])
    assert (_chosen("auto", small), _chosen("auto", large), _chosen("fine-tune", large)) == \
        ("fine-tune", "embeddings", "fine-tune")
    said = capsys.readouterr().out
    assert "0.4M weights in its layers: K fine-tunings" in said and "21.2M weights" in said
    assert FINE_TUNE_UP_TO < 21_233_664
