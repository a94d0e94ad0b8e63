import json

import numpy as np
import paddle
import pytest

from conftest import LABELS, features_of, synthetic_rows
from paddle_ft.data.features import pad_batch
from paddle_ft.data.labels import LabelMap
from paddle_ft.engine.evaluate import predict_probabilities
from paddle_ft.errors import UserError
from paddle_ft.export import export_model, parity_max_abs_diff
from paddle_ft.infer import Predictor


@pytest.fixture
def model_dir(tmp_path, make_model, tokenizer):
    from paddle_ft.model import save_model

    folder = tmp_path / "best"
    folder.mkdir()
    model = make_model(seed=5)
    save_model(model, folder, {"dropout": 0.0, "max_length": 64, "format": "tsv", "text_column": "text",
                               "text_pair_column": None, "label_column": "label"})
    tokenizer.save_pretrained(str(folder))
    LabelMap(LABELS).save(folder)
    return folder


@pytest.fixture
def exported(model_dir, tmp_path):
    info = export_model(model_dir, tmp_path / "export")
    return tmp_path / "export", info


@pytest.mark.parametrize("architecture", ["bert", "ernie", "roberta"])
def test_saved_model_reloads_identically(architecture, tmp_path, make_model, tokenizer):
    from paddle_ft.model import load_model, save_model

    model = make_model(seed=1, architecture=architecture)
    model.eval()
    save_model(model, tmp_path, {"max_length": 64})
    loaded, meta = load_model(tmp_path)
    ids = paddle.to_tensor([[2, 7, 8, 9, 3, 0]])
    assert np.array_equal(model(ids).numpy(), loaded(ids).numpy())
    assert meta["num_classes"] == 2 and meta["max_length"] == 64


def test_export_folder_stands_alone_and_records_parity(exported):
    folder, info = exported
    names = {p.name for p in folder.iterdir()}
    assert {"model.pdiparams", "label_map.json", "export.json", "vocab.txt", "tokenizer_config.json"} <= names
    assert ("model.json" in names) or ("model.pdmodel" in names)
    on_disk = json.loads((folder / "export.json").read_text())
    assert on_disk["inputs"] == ["input_ids", "token_type_ids"]
    assert on_disk["paddle_version"] == paddle.__version__
    assert on_disk["parity_max_abs_diff"] == info["parity_max_abs_diff"] < 1e-4


def test_exported_logits_match_dygraph_on_padded_batches(exported, model_dir, tokenizer):
    from paddle_ft.model import load_model

    folder, _ = exported
    model, _ = load_model(model_dir)
    predictor = Predictor(folder)
    features = features_of(synthetic_rows(24, seed=9), tokenizer)
    batch = pad_batch(features, list(range(24)), tokenizer.pad_token_id)
    dygraph = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"])).numpy()
    assert np.abs(predictor.run(batch["input_ids"], batch["token_type_ids"]) - dygraph).max() < 1e-4
    assert parity_max_abs_diff(model, Predictor(folder, enable_onednn=False), len(tokenizer.vocab),
                               tokenizer.pad_token_id, 64) < 1e-4


def test_predictor_probabilities_equal_dygraph_softmax(exported, model_dir, tokenizer):
    from paddle_ft.model import load_model

    folder, _ = exported
    model, _ = load_model(model_dir)
    rows = synthetic_rows(37, seed=4)
    expected = predict_probabilities(model, features_of(rows, tokenizer), 64, tokenizer.pad_token_id)
    predictor = Predictor(folder, cpu_threads=1)
    texts = [text for text, _ in rows]
    np.testing.assert_allclose(predictor.probabilities(texts, batch_size=5), expected, atol=1e-5)
    results = predictor.predict(texts, batch_size=8)
    assert [r.label for r in results] == [LABELS[i] for i in expected.argmax(axis=1)]
    assert results[0].score == pytest.approx(float(expected[0].max()), abs=1e-5)
    assert sum(results[0].probabilities.values()) == pytest.approx(1.0, abs=1e-5)
    assert results[0].top(2) == sorted(results[0].probabilities.items(), key=lambda item: -item[1])
    assert predictor.predict([]) == []


def test_parity_failure_writes_nothing(model_dir, tmp_path):
    from paddle_ft.export import ParityError

    with pytest.raises(ParityError, match="nothing was written"):
        export_model(model_dir, tmp_path / "strict", tolerance=-1.0)
    assert not (tmp_path / "strict").exists()


def test_predictor_refuses_a_folder_without_a_model(tmp_path):
    with pytest.raises(UserError, match="holds no exported model"):
        Predictor(tmp_path)


@pytest.mark.gpu
def test_gpu_predictor_matches_cpu(exported):
    folder, _ = exported
    texts = [t for t, _ in synthetic_rows(16)]
    np.testing.assert_allclose(Predictor(folder, device="gpu").probabilities(texts),
                               Predictor(folder).probabilities(texts), atol=1e-4)


def test_predictor_is_exported_at_package_level_and_checks_precision(exported):
    import paddle_ft

    assert paddle_ft.Predictor is Predictor
    folder, _ = exported
    with pytest.raises(UserError, match="precision 'fp16' on device 'cpu'"):
        Predictor(folder, precision="fp16")
    with pytest.raises(UserError, match="TensorRT needs --device gpu"):
        Predictor(folder, use_tensorrt=True)


def test_bf16_runs_where_the_cpu_has_it_and_is_refused_where_not(exported):
    from paddle_ft.runtime import cpu_supports_bf16

    folder, _ = exported
    texts = [t for t, _ in synthetic_rows(8)]
    if cpu_supports_bf16():
        np.testing.assert_allclose(Predictor(folder, precision="bf16").probabilities(texts),
                                   Predictor(folder).probabilities(texts), atol=2e-2)
    else:
        with pytest.raises(UserError, match="needs a CPU with AVX512-BF16 or AMX-BF16"):
            Predictor(folder, precision="bf16")
