"""Explanations: integrated gradients add up to the change they explain, find the one keyword that decides a label,
and removing the tokens they rank first costs the answer more than removing as many random tokens; the nearest
training texts; pairs and multi-label; the command and the report."""
import json
import random

import numpy as np
import pytest

from conftest import (DEMO, LABELS, NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS, overrides, tiny_meta, write_tsv,
                      write_vocab)
from paddle_ft.analysis.explain import Explainer
from paddle_ft.artifacts.bundle import save_bundle
from paddle_ft.cli import main
from paddle_ft.data.readers import Example
from paddle_ft.errors import UserError

MOODS = {"正面": POSITIVE_CHARS, "负面": NEGATIVE_CHARS, "中性": ""}


def keyword_rows(n: int, seed: int, keywords: int = 1) -> list[tuple[str, str]]:
    """Neutral characters with `keywords` mood characters, which alone decide the label; a text with none is 中性.
    (With two labels the model may learn one kind of keyword and take its absence for the other label: then the
    other label's keywords truly do not matter to it, and no explanation should say they do.)"""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = tuple(MOODS)[i % 3]
        words = [rng.choice(NEUTRAL_CHARS) for _ in range(rng.randint(5, 20))]
        for _ in range(keywords if MOODS[label] else 0):
            words.insert(rng.randrange(len(words) + 1), rng.choice(MOODS[label]))
        rows.append(("".join(words), label))
    return rows


@pytest.fixture(scope="module")
def keyword_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("keyword")
    for split, n, seed in (("train", 600, 1), ("dev", 150, 2), ("test", 150, 3)):
        write_tsv(root / f"{split}.tsv", keyword_rows(n, seed))
    args = [f"output_dir={root / 'out'}", *(f"data.{s}={root / s}.tsv" for s in ("train", "dev", "test")),
            "data.labels=null", "model.pooling=mean", "data.max_length=32", "data.cache_dir=null",
            f"model.scratch.vocab_file={write_vocab(root / 'vocab.txt')}",
            "model.scratch.hidden_size=32", "model.scratch.num_layers=2", "model.scratch.num_heads=2",
            "model.scratch.intermediate_size=64", "model.scratch.max_position_embeddings=32", "train.epochs=8",
            "train.batch_size=16", "train.optimizer.learning_rate=1e-3", "train.runtime.log_every=100",
            "train.runtime.write_report=true"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    results = json.loads((root / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["test"]["accuracy"] >= 0.95  # a model that did learn the keyword, or the test means nothing
    return root


def test_the_deciding_keyword_gets_the_largest_attribution(keyword_model):
    explainer = Explainer.load(keyword_model / "out" / "best")
    rows = [(text, label) for text, label in keyword_rows(150, 3) if label != "中性"]
    found = 0
    for text, _ in rows:
        (explanation,) = explainer.explain(text)
        keyword = next(c for c in text if c in POSITIVE_CHARS + NEGATIVE_CHARS)
        found += explanation.top_tokens(1)[0][1] == keyword
        # 50 gradient points: the attributions add up to the change they explain, to 2% of it
        assert explanation.completeness_error < 0.02 * abs(explanation.probability - explanation.baseline_probability)
    assert found >= 0.9 * len(rows), (found, len(rows))


def test_removing_the_top_attributed_tokens_costs_more_than_removing_random_ones(keyword_model):
    """The deletion test, on texts with two keywords (k = 2): the predicted label's probability after the two tokens
    ranked first are removed, against after two random tokens are."""
    explainer = Explainer.load(keyword_model / "out" / "best")
    rng = random.Random(5)
    rows = [(text, label) for text, label in keyword_rows(90, 4, keywords=2) if label != "中性"]
    wins = 0
    for text, _ in rows:
        (explanation,) = explainer.explain(text)
        top = [position for position, _, _ in explanation.top_tokens(2)]
        chosen = rng.sample(range(1, len(explanation.tokens) - 1), 2)  # [CLS] and [SEP] stay
        after = [explainer.probability_without(explanation, drop) for drop in (top, chosen)]
        wins += after[0] < after[1]
    assert wins >= 0.9 * len(rows), (wins, len(rows))


def test_the_nearest_training_texts_share_the_keyword_label(keyword_model):
    explainer = Explainer.load(keyword_model / "out" / "best")
    explainer.index([Example(t, None, label, line) for line, (t, label) in enumerate(keyword_rows(400, 1), 2)])
    near = explainer.nearest("的的好的的", 5)
    assert [n.label for n in near] == ["正面"] * 5
    assert all(-1 <= n.similarity <= 1 for n in near) and near[0].similarity >= near[-1].similarity


@pytest.fixture
def saved(tmp_path, tokenizer, make_model):
    def save(**meta):
        model = make_model(seed=3)
        save_bundle(tmp_path / "best", model, tokenizer, tiny_meta(**meta))
        return Explainer.load(tmp_path / "best", steps=64)

    return save


def test_a_pair_is_explained_token_by_token_over_both_texts(saved):
    explainer = saved(text_pair_column="text_pair")
    (explanation,) = explainer.explain("质量好", "物流慢")
    assert explanation.segments.count(1) == 4  # 物 流 慢 [SEP]
    assert explanation.completeness_error < 0.01
    assert explanation.attributions[explanation.tokens.index("[SEP]")] == 0.0


def test_a_multi_label_answer_is_explained_label_by_label(saved):
    explainer = saved(task="multi_label", thresholds=(0.0, 0.0))  # both labels always in the answer
    explanations = explainer.explain("质量好物流慢")
    assert [e.label for e in explanations] == list(LABELS)
    assert all(e.completeness_error < 0.01 for e in explanations)
    assert not np.allclose(explanations[0].attributions, explanations[1].attributions)
    (only,) = explainer.explain("质量好物流慢", label=LABELS[1])
    assert np.allclose(only.attributions, explanations[1].attributions)


def test_the_command_prints_one_json_object_per_explanation_and_refuses_an_export(keyword_model, tmp_path, capsys):
    best = keyword_model / "out" / "best"
    page = tmp_path / "why.html"
    assert main(["explain", "--model", str(best), "--text", "的的好的的", "--text", "的的坏的的", "--steps", "20",
                 "--html", str(page)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["label"] for line in lines] == ["正面", "负面"]
    assert [t["token"] for t in lines[1]["tokens"]] == ["[CLS]", "的", "的", "坏", "的", "的", "[SEP]"]
    assert lines[0]["top_tokens"][0] == "好" and len(lines[0]["neighbours"]) == 3  # from the manifest's train file
    assert page.read_text(encoding="utf-8").count('class="explanation"') == 2
    assert main(["explain", "--model", str(best), "--text", "x", "--label", "中立"]) == 2
    assert "--label '中立' is not one of the model's labels (" in capsys.readouterr().err
    assert main(["explain", "--model", str(best), "--text", "好", "--text-pair", "坏"]) == 2
    assert capsys.readouterr().err == f"error: {best} was trained on single texts: leave out --text-pair\n"


def test_the_report_explains_its_most_confident_mistakes(keyword_model):
    page = (keyword_model / "out" / "report.html").read_text(encoding="utf-8")
    results = json.loads((keyword_model / "out" / "results.json").read_text(encoding="utf-8"))
    mistakes = round((1 - results["test"]["accuracy"]) * results["test"]["examples"])
    assert page.count('class="explanation"') == min(mistakes, 3)
    assert ("Why the most confident ones" in page) == (mistakes > 0)


def test_python_reaches_the_explainer_from_the_package(keyword_model):
    import paddle_ft

    (explanation,) = paddle_ft.Explainer.load(keyword_model / "out" / "best").explain("的的好的的")
    assert explanation.label == "正面" and explanation.top_tokens(1)[0][1] == "好"


def test_the_html_page_never_replaces_the_data_it_reads(keyword_model, capsys):
    best, data = keyword_model / "out" / "best", keyword_model / "train.tsv"
    before = data.read_bytes()
    assert main(["explain", "--model", str(best), "--text", "好", "--data", str(data), "--html", str(data)]) == 2
    assert f"--html {data} is the --data file: writing it would replace what is read" in capsys.readouterr().err
    assert data.read_bytes() == before


# issue 43, root 3: explain reads texts by the rule predict, the API and the server use
@pytest.mark.parametrize("text, pair", [("", None), ("   ", None), ("\u200b\u200b", None), ("\x07\x1b", None),
                                        ("好", "")])
def test_a_text_the_model_cannot_read_gets_no_explanation(saved, text, pair):
    explainer = saved(text_pair_column="text_pair" if pair is not None else None)
    which = "the second text" if pair is not None else "the text"
    with pytest.raises(UserError, match=f"^{which} holds no character the model reads"):
        explainer.explain(text, pair)


def test_the_command_refuses_an_unreadable_text_as_predict_does(keyword_model, capsys):
    best = keyword_model / "out" / "best"
    assert main(["explain", "--model", str(best), "--text", "好", "--text", " \u200b "]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --text #2 holds no character the model reads") and err.count("\n") == 1
