import json

import numpy as np
import paddle
import pytest
from conftest import LABELS, features_of, synthetic_rows, tiny_meta

from paddle_ft.artifacts.bundle import load_bundle, save_bundle
from paddle_ft.artifacts.export_folder import program_file
from paddle_ft.data.features import pad_batch
from paddle_ft.engine.evaluate import predict_probabilities
from paddle_ft.errors import UserError
from paddle_ft.export import export_model, parity_max_abs_diff
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor, stack_probabilities


@pytest.fixture
def model_dir(tmp_path, make_model, tokenizer):
    folder = tmp_path / "best"
    save_bundle(folder, make_model(seed=5), tokenizer, tiny_meta())
    return folder


@pytest.fixture
def exported(model_dir, tmp_path):
    info = export_model(model_dir, tmp_path / "export")
    return tmp_path / "export", info


@pytest.mark.parametrize("architecture", ["bert", "ernie", "roberta"])
def test_saved_model_reloads_identically(architecture, tmp_path, make_model, tokenizer):
    model = make_model(seed=1, architecture=architecture)
    model.eval()
    meta = tiny_meta(text_pair_column="answer", truncation="head")
    save_bundle(tmp_path / "best", model, tokenizer, meta)
    loaded = load_bundle(tmp_path / "best")
    ids = paddle.to_tensor([[2, 7, 8, 9, 3, 0]])
    assert np.array_equal(model(ids).numpy(), loaded.model(ids).numpy())
    assert loaded.meta == meta and loaded.label_map.names == LABELS
    assert loaded.tokenizer.vocab.token_to_idx == tokenizer.vocab.token_to_idx


def test_export_folder_stands_alone_and_records_parity(exported):
    folder, info = exported
    names = {p.name for p in folder.iterdir()}
    assert {"model.pdiparams", "label_map.json", "export.json", "vocab.txt", "tokenizer_config.json"} <= names
    assert ("model.json" in names) or ("model.pdmodel" in names)
    on_disk = json.loads((folder / "export.json").read_text())
    assert on_disk["inputs"] == ["input_ids", "token_type_ids"]
    assert on_disk["paddle_version"] == paddle.__version__
    assert on_disk["parity_max_abs_diff"] == info.parity_max_abs_diff < 1e-4
    assert on_disk["model"] == json.loads((folder.parent / "best" / "paddle_ft.json").read_text())  # one metadata


def test_exported_logits_match_dygraph_on_padded_batches(exported, model_dir, tokenizer):
    folder, _ = exported
    model = load_bundle(model_dir).model
    predictor = Predictor(folder)
    features = features_of(synthetic_rows(24, seed=9), tokenizer)
    batch = pad_batch(features, list(range(24)), tokenizer.pad_token_id)
    dygraph = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"])).numpy()
    assert np.abs(predictor.run(batch["input_ids"], batch["token_type_ids"]) - dygraph).max() < 1e-4
    assert parity_max_abs_diff(model, Predictor(folder, PredictOptions(enable_onednn=False)), len(tokenizer.vocab),
                               tokenizer.pad_token_id, 64) < 1e-4


def test_predictor_probabilities_equal_dygraph_softmax(exported, model_dir, tokenizer):
    folder, _ = exported
    model = load_bundle(model_dir).model
    rows = synthetic_rows(37, seed=4)
    expected = predict_probabilities(model, features_of(rows, tokenizer), 64, tokenizer.pad_token_id)
    predictor = Predictor(folder, PredictOptions(cpu_threads=1))
    texts = [text for text, _ in rows]
    np.testing.assert_allclose(stack_probabilities(predictor.predict(texts, batch_size=5)), expected, atol=1e-5)
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
    np.testing.assert_allclose(stack_probabilities(Predictor(folder, PredictOptions(device="gpu")).predict(texts)),
                               stack_probabilities(Predictor(folder).predict(texts)), atol=1e-4)


def test_predictor_is_exported_at_package_level_and_checks_precision(exported):
    import paddle_ft

    assert paddle_ft.Predictor is Predictor
    folder, _ = exported
    with pytest.raises(UserError, match="precision 'fp16' on device 'cpu'"):
        Predictor(folder, PredictOptions(precision="fp16"))
    with pytest.raises(UserError, match="TensorRT needs --device gpu"):
        Predictor(folder, PredictOptions(use_tensorrt=True))


def test_bf16_runs_where_the_cpu_has_it_and_is_refused_where_not(exported):
    from paddle_ft.runtime import cpu_supports_bf16

    folder, _ = exported
    texts = [t for t, _ in synthetic_rows(8)]
    if cpu_supports_bf16():
        bf16 = Predictor(folder, PredictOptions(precision="bf16"))
        np.testing.assert_allclose(stack_probabilities(bf16.predict(texts)),
                                   stack_probabilities(Predictor(folder).predict(texts)), atol=2e-2)
    else:
        with pytest.raises(UserError, match="needs a CPU with AVX512-BF16 or AMX-BF16"):
            Predictor(folder, PredictOptions(precision="bf16"))


def test_metadata_of_another_layout_is_refused_with_how_to_make_it_again(model_dir, exported):
    (model_dir / "paddle_ft.json").write_text(json.dumps({"num_classes": 2, "max_length": 64}), encoding="utf-8")
    with pytest.raises(UserError, match=r"paddle_ft.json is damaged \(its fields are not a paddle_ft model's\); "
                                        "train the model again"):
        load_bundle(model_dir)
    folder, _ = exported
    info = json.loads((folder / "export.json").read_text())
    (folder / "export.json").write_text(json.dumps({**info, "model": {**info["model"], "format_version": 1}}))
    with pytest.raises(UserError, match=r"export.json is damaged or from a newer paddle_ft \(format_version\); "
                                        "re-create it with tools/export.py"):
        Predictor(folder)


def test_the_export_carries_an_onnx_graph_that_onnx_runtime_serves_equally(exported, model_dir, tokenizer):
    folder, info = exported
    assert info.onnx_file == "model.onnx" and (folder / "model.onnx").is_file()
    assert json.loads((folder / "export.json").read_text())["parity_max_abs_diff_onnx"] < 1e-4
    default = Predictor(folder, PredictOptions(cpu_threads=1))
    paddle_inference = Predictor(folder, PredictOptions(cpu_threads=1, backend="paddle"))
    assert default.backend == "auto" and paddle_inference.backend == "paddle"  # fp32 on CPU: both, per call
    texts = [text for text, _ in synthetic_rows(40, seed=4)]
    np.testing.assert_allclose(stack_probabilities(default.predict(texts)),
                               stack_probabilities(paddle_inference.predict(texts)), atol=1e-5)
    # oneDNN off: Paddle's choice
    assert Predictor(folder, PredictOptions(cpu_threads=1, enable_onednn=False)).backend == "paddle"


@pytest.mark.parametrize("options, message", [
    ({"backend": "tvm"}, "backend 'tvm': choose one of auto, paddle, onnxruntime"),
    ({"backend": "onnxruntime", "enable_onednn": False}, "TensorRT and oneDNN are Paddle Inference's"),
])
def test_a_backend_that_cannot_run_the_request_is_one_line(exported, options, message):
    with pytest.raises(UserError, match=message):
        Predictor(exported[0], PredictOptions(cpu_threads=1, **options))


def test_an_export_without_onnx_is_served_by_paddle_and_says_why(model_dir, tmp_path, capsys):
    from paddle_ft.cli import main

    assert main(["export", "--model", str(model_dir), "--output", str(tmp_path / "plain"), "--no-onnx"]) == 0
    assert "(no ONNX graph: --no-onnx)" in capsys.readouterr().out
    assert not (tmp_path / "plain" / "model.onnx").exists()
    assert Predictor(tmp_path / "plain", PredictOptions(cpu_threads=1)).backend == "paddle"
    with pytest.raises(UserError, match="has no model.onnx .* or use --backend paddle"):
        Predictor(tmp_path / "plain", PredictOptions(cpu_threads=1, backend="onnxruntime"))
    assert main(["predict", "--export", str(tmp_path / "plain"), "--text", "好", "--backend", "paddle"]) == 0


def test_paddles_out_tensor_warning_is_dropped_and_nothing_else():
    from paddle_ft.export import without_known_warnings

    printed = ("W1202 22:13:18.228003 11638 eager_utils.cc:3584] Paddle static graph(PIR) not support input out "
               "tensor for now!!!!!\nW1202 22:13:19.000001 11638 other.cc:1] something else\n")
    assert without_known_warnings(printed) == "W1202 22:13:19.000001 11638 other.cc:1] something else\n"


@pytest.mark.slow
def test_an_export_prints_no_paddle_warning(model_dir, tmp_path):
    """In a fresh process: Paddle prints its warning on a process's first jit.save only."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "paddle_ft", "export", "--model", str(model_dir), "--output",
                           str(tmp_path / "quiet"), "--no-onnx"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "exported to" in done.stdout
    assert "not support input out tensor" not in done.stdout + done.stderr


def test_a_failed_onnx_conversion_shows_what_paddle2onnx_printed(exported, tmp_path, monkeypatch, capfd):
    import os

    import paddle2onnx

    from paddle_ft.inference.backends import write_onnx

    def fail(*args, **kwargs):
        os.write(2, b"[Paddle2ONNX] Oops: no converter for op frobnicate\n")  # as its C++ does
        raise RuntimeError("conversion failed")

    monkeypatch.setattr(paddle2onnx, "export", fail)
    folder, _ = exported
    with pytest.raises(UserError, match="paddle2onnx could not convert .* \\(conversion failed\\); export with"):
        write_onnx(program_file(folder), tmp_path / "model.onnx")
    assert "no converter for op frobnicate" in capfd.readouterr().err


def test_a_failed_jit_save_still_shows_what_paddle_printed(model_dir, tmp_path, monkeypatch, capfd):
    import os

    def fail(*args, **kwargs):
        os.write(2, b"E1202 22:13:18.000000 1 pir.cc:1] cannot trace op frobnicate\n")  # as Paddle's C++ does
        raise RuntimeError("trace failed")

    monkeypatch.setattr(paddle.jit, "save", fail)
    with pytest.raises(RuntimeError, match="trace failed"):
        export_model(model_dir, tmp_path / "broken")
    assert "cannot trace op frobnicate" in capfd.readouterr().err
    assert not (tmp_path / "broken").exists()
