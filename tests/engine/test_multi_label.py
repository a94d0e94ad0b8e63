"""Multi-label classification: label sets read and checked, sigmoid + binary cross-entropy, per-label thresholds
tuned on dev and saved with the model, and the same label sets from eval, the exported model, predict, the
Classifier and the HTTP service."""
import json
import random

import numpy as np
import pytest
from conftest import DEMO, SPECIAL_TOKENS, overrides

from paddle_ft.config import load_config
from paddle_ft.data.readers import Columns, read_examples
from paddle_ft.engine.metrics import multi_label_report, tune_thresholds
from paddle_ft.errors import ConfigError, DataError

TOPICS = {"体育": "球", "财经": "股", "科技": "芯", "健康": "药"}  # each label told by its own keyword
SHARE = {"体育": 0.4, "财经": 0.4, "科技": 0.3, "健康": 0.08}  # 健康 is rare
FILLER = "的了是我这个天人们说在有和也很都就会上"
MULTI = ["task=multi_label", "train.evaluation.metric=micro_f1"]


def topic_rows(n: int, seed: int) -> list[tuple[str, str]]:
    """(text, "label,label") rows: 8-20 filler characters with the keyword of each of the row's labels inserted;
    about 1 row in 12 has no label at all."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        labels = [name for name in TOPICS if rng.random() < SHARE[name]]
        chars = [rng.choice(FILLER) for _ in range(rng.randint(8, 20))]
        for name in labels:
            chars.insert(rng.randint(0, len(chars)), TOPICS[name])
        rows.append(("".join(chars), ",".join(labels)))
    return rows


def write_rows(path, rows):
    path.write_text("text\tlabels\n" + "".join(f"{text}\t{labels}\n" for text, labels in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- reading label sets

COLUMNS = Columns("text", None, "labels", ",")


@pytest.mark.parametrize("cell, message", [
    ("体育,足球", ":2: label '足球' is not one of 体育, 健康, 科技, 财经"),
    ("", ":2: no label; give at least one, or set data.allow_no_label: true"),
    ("体育,体育", ":2: label '体育' is given twice"),
    ("体育,,财经", ":2: an empty label name in '体育,,财经': remove the stray ','"),
])
def test_a_bad_label_set_is_a_bad_row_with_its_file_and_line(tmp_path, cell, message):
    path = tmp_path / "rows.tsv"
    path.write_text(f"text\tlabels\n比赛\t{cell}\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"{path.name}{message}"):
        read_examples(path, "tsv", COLUMNS, frozenset(TOPICS))


def test_label_sets_from_a_delimiter_or_a_json_list(tmp_path):
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("text\tlabels\n比赛\t体育 | 财经\n无关\t\n", encoding="utf-8")
    examples, _ = read_examples(tsv, "tsv", Columns("text", None, "labels", "|", allow_no_label=True))
    assert [e.label for e in examples] == [("体育", "财经"), ()]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"text": "比赛", "labels": ["体育", "财经"]}\n{"text": "芯片", "labels": "科技"}\n',
                     encoding="utf-8")
    examples, _ = read_examples(jsonl, "jsonl", COLUMNS)
    assert [e.label for e in examples] == [("体育", "财经"), ("科技",)]
    jsonl.write_text('{"text": "x", "labels": 3}\n', encoding="utf-8")
    with pytest.raises(DataError, match=":1: column .labels. is not a string of label names or a list of them"):
        read_examples(jsonl, "jsonl", COLUMNS)


@pytest.mark.parametrize("override, message", [
    (["task=multi_label"], "'train.evaluation.metric' .*: is accuracy, but a multi_label model is picked by "
                           "micro_f1, macro_f1, subset_accuracy: set train.evaluation.metric: micro_f1"),
    (["train.evaluation.metric=micro_f1"], "'train.evaluation.metric' .*: micro_f1 scores a multi_label model; set "
                                           "task: multi_label"),
    ([*MULTI, "train.class_weights=auto"], "'train.class_weights' .*: is 'auto', but a multi_label model learns each "
                                           "label by binary cross-entropy"),
    ([*MULTI, "train.loss=focal"], "'train.loss' .*: is 'focal', but a multi_label model"),
    ([*MULTI, "data.label_delimiter=' '"], "'data.label_delimiter' .*: expected a non-blank string without a tab"),
])
def test_multi_label_keys_are_validated_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(DEMO, override)


# ----------------------------------------------------------------------------- metrics and thresholds

def test_multi_label_metrics_are_exact():
    gold = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    predicted = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0], [0, 0, 0]])
    report = multi_label_report(gold, predicted, ("a", "b", "c"))
    # true positives 4, predicted 5, gold 5: micro P = R = F1 = 0.8
    assert report["micro_f1"] == pytest.approx(0.8) and report["micro_precision"] == pytest.approx(0.8)
    assert report["per_label"]["a"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}
    assert report["per_label"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert report["macro_f1"] == pytest.approx(2 / 3)
    assert report["subset_accuracy"] == 0.5 and report["hamming_loss"] == pytest.approx(2 / 12)
    low, high = report["intervals"]["subset_accuracy"]  # four texts: a wide interval around the point
    assert 0 <= low < 0.5 < high <= 1
    low, high = report["intervals"]["micro_f1"]
    assert 0 <= low <= 0.8 <= high <= 1


def test_each_threshold_maximises_its_labels_f1_halfway_between_scores():
    probs = np.array([[0.9, 0.30, 0.6], [0.8, 0.20, 0.4], [0.3, 0.25, 0.7], [0.1, 0.10, 0.2]])
    gold = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0]])
    thresholds = tune_thresholds(gold, probs, min_positives=1)
    # label 0: any cut between 0.3 and 0.8 is perfect; 0.55 is the one halfway. Label 1: 0.30 and 0.20 are
    # positive, 0.25 is not: cutting below 0.20 (F1 0.8) beats cutting at 0.30 (0.67). Label 2: no positive
    assert thresholds == pytest.approx([0.55, 0.15, 0.5])


# ----------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny multi-label model trained on the keyword corpus, evaluated and exported."""
    from paddle_ft.cli import main

    root = tmp_path_factory.mktemp("multi")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *sorted(set(FILLER + "".join(TOPICS.values())))]) + "\n",
                     encoding="utf-8")
    for split, n, seed in (("train", 400, 1), ("dev", 150, 2), ("test", 200, 3)):
        write_rows(root / f"{split}.tsv", topic_rows(n, seed))
    args = [f"output_dir={root / 'out'}", *(f"data.{s}={root / s}.tsv" for s in ("train", "dev", "test")),
            "data.label_column=labels", "data.labels=null", "data.allow_no_label=true", "data.max_length=32",
            "data.cache_dir=null", f"model.scratch.vocab_file={vocab}", "model.scratch.hidden_size=32",
            "model.scratch.num_layers=1", "model.pooling=mean", "model.scratch.num_heads=2",
            "model.scratch.intermediate_size=64",
            "model.scratch.max_position_embeddings=32", "train.epochs=15", "train.batch_size=16",
            "train.optimizer.learning_rate=3e-3", "train.runtime.log_every=10", *MULTI]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    out = root / "out"
    assert main(["export", "--model", str(out / "best"), "--output", str(out / "export")]) == 0
    return root


def test_thresholds_tuned_on_dev_beat_one_half_and_the_test_set_is_learnt(trained):
    results = json.loads((trained / "out" / "results.json").read_text(encoding="utf-8"))
    dev, test = results["dev"], results["test"]
    assert test["micro_f1"] >= 0.95, test
    assert dev["micro_f1"] > dev["at_threshold_0.5"]["micro_f1"], dev
    assert set(dev["thresholds"]) == set(TOPICS) and test["thresholds"] == dev["thresholds"]  # test: dev's
    assert "at_threshold_0.5" not in test
    saved = json.loads((trained / "out" / "best" / "paddle_ft.json").read_text(encoding="utf-8"))
    assert saved["task"] == "multi_label"
    assert saved["thresholds"] == [dev["thresholds"][name] for name in saved["labels"]]
    events = [json.loads(line) for line in (trained / "out" / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in events if e["event"] == "eval"]
    assert len(evals) == 15 and max(e["micro_f1"] for e in evals) == dev["micro_f1"]  # an eval per epoch picks best/


def test_eval_predict_classifier_and_http_give_the_same_label_sets(trained, capsys):
    from paddle_ft.cli import main
    from paddle_ft.inference.classifier import Classifier
    from paddle_ft.inference.predictor import Predictor

    export, rows = trained / "out" / "export", topic_rows(200, 3)
    info = json.loads((export / "export.json").read_text(encoding="utf-8"))
    assert info["parity_max_abs_diff"] <= 1e-4
    texts, gold = [text for text, _ in rows], [set(filter(None, labels.split(","))) for _, labels in rows]
    predicted = [set(p.labels) for p in Predictor(export).predict(texts)]
    assert np.mean([p == g for p, g in zip(predicted, gold)]) >= 0.9  # subset accuracy of the exported model

    capsys.readouterr()
    assert main(["eval", "--model", str(trained / "out" / "best"), "--data", str(trained / "test.tsv")]) == 0
    report = json.loads(capsys.readouterr().out)
    wrong = (trained / "out" / "misclassified-test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert len(wrong) == sum(p != g for p, g in zip(predicted, gold))
    assert report["subset_accuracy"] == pytest.approx(1 - len(wrong) / len(rows))

    sample = texts[:6]
    assert main(["predict", "--export", str(export), *[a for t in sample for a in ("--text", t)]]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [set(r["labels"]) for r in records] == predicted[:6]
    assert all(set(r["probabilities"]) == set(TOPICS) and "label" not in r for r in records)
    assert [set(answer["labels"]) for answer in Classifier(export)(sample)] == predicted[:6]


@pytest.mark.slow  # starts a server
def test_the_http_service_answers_label_sets_and_its_schema_says_so(trained):
    import httpx

    from paddle_ft.inference.predictor import Predictor
    from bench.server_process import ServerProcess

    export, texts = trained / "out" / "export", [text for text, _ in topic_rows(12, 4)]
    server = ServerProcess(export, trained / "server.log", "--threads", "1")
    try:
        response = httpx.post(f"{server.url}/v1/classify", json={"texts": texts}, timeout=60)
        schema = httpx.get(f"{server.url}/openapi.json", timeout=60).json()
    finally:
        assert server.stop() == 0
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["labels"] for r in results] == [list(p.labels) for p in Predictor(export).predict(texts)]
    assert all("label" not in r and set(r["probabilities"]) == set(TOPICS) for r in results)
    answer = schema["components"]["schemas"]["Classification"]
    assert "labels" in answer["required"] and not {"label", "score", "abstained"} & set(answer["properties"])
    assert "abstain_below" not in schema["components"]["schemas"]["ClassifyRequest"]["properties"]


def test_a_multi_label_head_starts_at_each_labels_share_of_train(make_model):
    """Of thousands of labels, sigmoids starting at 0.5 are pushed down by every text and never learn their few
    positives: tools/many_labels_bench.py's 5,000 labels scored micro-F1 0.001 so, 0.71 starting at the priors."""
    from paddle_ft.workflows.build import start_at_label_priors

    model = make_model()
    labels = np.zeros((10, 2), dtype=np.float32)
    labels[:3, 0] = 1  # label 0 on 3 texts of 10, label 1 on none
    start_at_label_priors(model, labels)
    shares = 1 / (1 + np.exp(-model.classifier.bias.numpy()))
    assert shares == pytest.approx([0.3, 0.05])  # a label train never has starts at half a text's share


def test_labels_with_few_dev_positives_share_one_threshold_fitted_to_them_together():
    """5,000 labels with one dev text each: per-label thresholds fitted to one text gave test micro-F1 0.50 against
    0.58 at 0.5 (tools/many_labels_bench.py). Such labels share the cut that is best for all of them together."""
    rng = np.random.default_rng(0)
    gold = np.zeros((400, 30), dtype=np.float32)
    gold[np.arange(30), np.arange(30)] = 1  # labels 0-29: one positive each
    gold[30:130, 0] = 1  # label 0 has 101: its own threshold
    probs = rng.uniform(0, 0.3, size=gold.shape)
    probs[gold > 0] = rng.uniform(0.25, 1.0, size=int(gold.sum()))
    thresholds = tune_thresholds(gold, probs)
    assert len(set(thresholds[1:].tolist())) == 1 and 0.25 <= thresholds[1] <= 0.35  # one shared cut near 0.3
    assert thresholds[0] == tune_thresholds(gold, probs, min_positives=1)[0]  # a well-known label keeps its own
    assert (tune_thresholds(np.zeros_like(gold), probs) == 0.5).all()  # no positive at all: the default
