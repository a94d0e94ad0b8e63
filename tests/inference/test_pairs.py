"""Text pairs end to end: a model trained on (text, second text) keeps its second text through export,
Predictor, `predict`, `Classifier` and the HTTP service, and a single text sent to it is refused."""
import json

import httpx
import numpy as np
import paddle
import pytest
from conftest import export_tiny_model, synthetic_rows

from paddle_ft.cli import main
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor, stack_probabilities

PAIRS = [("质量很好", "物流很慢"), ("质量很好", "物流很快"), ("差差差", "好好好好"), ("好", "差")]


@pytest.fixture(scope="module")
def pair_export(tmp_path_factory):
    return export_tiny_model(tmp_path_factory.mktemp("pairs"), seed=7, text_pair_column="text_pair")


def test_exported_pair_logits_equal_dygraph(pair_export, tokenizer):
    from paddle_ft.artifacts.bundle import load_bundle
    from paddle_ft.data.features import Features, pad_batch, tokenize
    from paddle_ft.data.readers import Example

    rows = synthetic_rows(24, seed=11)
    examples = [Example(a, b, None, i) for i, ((a, _), (b, _)) in enumerate(zip(rows[::2], rows[1::2]))]
    model = load_bundle(pair_export.parent / "best").model
    features = tokenize(examples, tokenizer, 64)
    batch = pad_batch(Features(features.input_ids, features.token_type_ids, None), list(range(len(examples))),
                      tokenizer.pad_token_id)
    assert batch["token_type_ids"].max() == 1  # the second texts really are segment 1
    logits = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"])).numpy()
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    got = stack_probabilities(Predictor(pair_export, PredictOptions(cpu_threads=1)).predict(
        [e.text for e in examples], text_pair=[e.text_pair for e in examples]))
    assert np.abs(got - expected).max() < 1e-4


def test_the_second_text_changes_the_answer(pair_export):
    predictor = Predictor(pair_export, PredictOptions(cpu_threads=1))
    slow, fast = stack_probabilities(predictor.predict([PAIRS[0][0], PAIRS[1][0]], text_pair=[PAIRS[0][1], PAIRS[1][1]]))
    # 物流很慢 vs 物流很快 (a tiny random model scores near 0.5, so the change is small, but a dropped second
    # text gave exactly equal scores)
    assert np.abs(slow - fast).max() > 1e-6


@pytest.mark.slow  # starts a server
def test_predict_classifier_and_http_agree_on_pairs(pair_export, tmp_path, capsys):
    import paddle_ft
    from bench.server_process import ServerProcess

    texts, pairs = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    args = ["predict", "--export", str(pair_export)]
    for a, b in PAIRS:
        args += ["--text", a, "--text-pair", b]
    assert main(args) == 0
    cli = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["text"], r["text_pair"]) for r in cli] == PAIRS
    classify = paddle_ft.Classifier(pair_export, cpu_threads=1)
    tuples, lists = classify(PAIRS), classify(texts, text_pair=pairs)
    assert tuples == lists and classify(PAIRS[0]) == tuples[0]
    server = ServerProcess(pair_export, tmp_path / "server.log", "--threads", "1")
    try:
        answer = httpx.post(f"{server.url}/v1/classify", json={"texts": texts, "text_pair": pairs}, timeout=60)
        single = httpx.post(f"{server.url}/v1/classify", json={"texts": texts}, timeout=60)
        schema = httpx.get(f"{server.url}/openapi.json").json()["components"]["schemas"]["ClassifyRequest"]
    finally:
        assert server.stop() == 0
    assert answer.status_code == 200
    http = answer.json()["results"]
    for row, lib, served in zip(cli, tuples, http):
        assert row["label"] == lib["label"] == served["label"]
        assert abs(row["score"] - lib["score"]) < 1e-5 and abs(served["score"] - lib["score"]) < 1e-5
    assert single.status_code == 422 and "classifies text pairs" in single.json()["error"]["message"]
    assert "text_pair" in schema["required"]


def test_a_single_text_on_a_pair_model_and_a_pair_on_a_single_model_are_one_line_errors(pair_export, tmp_path,
                                                                                       capsys):
    assert main(["predict", "--export", str(pair_export), "--text", "好"]) == 2
    assert capsys.readouterr().err.startswith("error: this model classifies text pairs")
    single = export_tiny_model(tmp_path / "single")
    assert main(["predict", "--export", str(single), "--text", "好", "--text-pair", "差"]) == 2
    assert capsys.readouterr().err.startswith("error: this model classifies single texts")
    assert main(["predict", "--export", str(pair_export), "--text", "好", "--text", "差", "--text-pair", "差"]) == 2
    assert "2 texts but 1 second texts" in capsys.readouterr().err
    with pytest.raises(UserError, match="classifies text pairs"):
        Predictor(pair_export, PredictOptions(cpu_threads=1)).predict(["好"])


def test_pair_input_files_read_their_text_pair_column(pair_export, tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("text\ttext_pair\n" + "".join(f"{a}\t{b}\n" for a, b in PAIRS), encoding="utf-8")
    assert main(["predict", "--export", str(pair_export), "--input", str(data)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["text"], r["text_pair"]) for r in rows] == PAIRS
    (tmp_path / "plain.txt").write_text("好\n", encoding="utf-8")
    assert main(["predict", "--export", str(pair_export), "--input", str(tmp_path / "plain.txt")]) == 2
    assert "give a .tsv/.csv/.jsonl file with text and text_pair columns" in capsys.readouterr().err
