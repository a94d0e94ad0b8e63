"""best/ is a PaddleNLP folder: PaddleNLP's own classes read it, every weight, with paddle_ft's answers."""
import json

import numpy as np
import paddle
import pytest
from conftest import LABELS, tiny_meta

from paddle_ft.artifacts.bundle import load_bundle, read_weights, save_bundle


def logits_of(model, ids: np.ndarray) -> np.ndarray:
    tensor = paddle.to_tensor(ids)
    out = model(tensor, token_type_ids=paddle.zeros_like(tensor))
    return (out[0] if isinstance(out, (tuple, list)) else out).numpy()


IDS = np.array([[1, 7, 9, 11, 2, 0, 0], [1, 12, 2, 0, 0, 0, 0]], dtype=np.int64)  # [CLS] ... [SEP] [PAD]


@pytest.mark.parametrize("architecture", ["bert", "ernie"])
def test_paddlenlp_loads_every_weight_of_best_and_gives_its_logits(make_model, tokenizer, tmp_path, architecture):
    from paddlenlp.transformers import AutoModelForSequenceClassification

    model = make_model(seed=3, architecture=architecture)
    model.eval()
    save_bundle(tmp_path / "best", model, tokenizer, tiny_meta())
    config = json.loads((tmp_path / "best" / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == [f"{architecture.capitalize()}ForSequenceClassification"]
    assert config["id2label"] == {str(i): name for i, name in enumerate(LABELS)}
    assert config["label2id"] == {name: i for i, name in enumerate(LABELS)}
    theirs = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "best"))
    theirs.eval()
    assert type(theirs).__name__ == config["architectures"][0] and theirs.num_labels == len(LABELS)
    saved = read_weights(tmp_path / "best")
    loaded = theirs.state_dict()
    assert set(loaded) == set(saved)  # nothing newly initialised, nothing left over
    assert all(np.array_equal(loaded[name].numpy(), saved[name].numpy()) for name in saved)
    np.testing.assert_allclose(logits_of(theirs, IDS), logits_of(model, IDS), atol=1e-6)
    np.testing.assert_allclose(logits_of(load_bundle(tmp_path / "best").model, IDS), logits_of(model, IDS), atol=1e-6)


def test_a_model_paddlenlp_has_no_classifier_for_saves_an_encoder_it_loads_whole(make_model, tokenizer, tmp_path):
    """cls pooling (and a RoBERTa encoder) is not what PaddleNLP's sequence classifiers compute: config.json then
    names the encoder class, and AutoModel loads every encoder weight from best/."""
    from paddlenlp.transformers import AutoModel

    from paddle_ft.models.networks import BERTForTextClassification

    encoder = make_model(seed=4).encoder
    model = BERTForTextClassification(encoder, len(LABELS), 0.0, "cls")
    model.eval()
    save_bundle(tmp_path / "best", model, tokenizer, tiny_meta(pooling="cls"))
    assert json.loads((tmp_path / "best" / "config.json").read_text())["architectures"] == ["BertModel"]
    theirs = AutoModel.from_pretrained(str(tmp_path / "best"))
    theirs.eval()
    saved = {name.removeprefix("bert."): tensor for name, tensor in read_weights(tmp_path / "best").items()
             if name.startswith("bert.")}
    assert set(theirs.state_dict()) == set(saved)
    tensor = paddle.to_tensor(IDS)
    np.testing.assert_allclose(theirs(tensor)[0].numpy(), encoder(tensor)[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(logits_of(load_bundle(tmp_path / "best").model, IDS), logits_of(model, IDS), atol=1e-6)


def test_the_dev_decision_is_read_from_a_report_in_one_place_and_kept_in_the_metadata():
    """Issue 47: the dev decision was an untyped dict, read in two places (the saved model's and test's)."""
    from conftest import LABELS, tiny_meta
    from paddle_ft.artifacts.meta import Decision

    report = {"thresholds": {LABELS[1]: 0.3, LABELS[0]: 0.7}, "temperature": 1.5,
              "decision": {"abstain_below": 0.6, "coverage": 0.9}}
    decision = Decision.from_report(report, LABELS)
    assert decision == Decision((0.7, 0.3), 1.5, 0.6)  # thresholds in label order, whatever the report's
    meta = tiny_meta()
    decided = meta.deciding(decision)
    assert (decided.thresholds, decided.temperature, decided.abstain_below) == ((0.7, 0.3), 1.5, 0.6)
    assert Decision.from_report(None, LABELS) == Decision() and meta.deciding(Decision()) == meta  # no dev: as trained
    assert meta.deciding(Decision(temperature=2.0)).abstain_below is None  # what was not fitted stays unset
