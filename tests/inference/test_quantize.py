"""`paddle_ft quantize`: an export's ONNX graph in int8, written only when its accuracy holds, and served by ONNX
Runtime only."""
import json

import pytest
from conftest import DEMO, overrides, write_splits, write_vocab

from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.inference.quantize import AccuracyDropped, quantize_export


@pytest.fixture(scope="module")
def trained_export(tmp_path_factory):
    """A tiny classifier trained on the synthetic corpus and exported; (export folder, labelled test file)."""
    from paddle_ft.cli import main

    root = write_splits(tmp_path_factory.mktemp("quantize"), (400, 100, 300))
    vocab = write_vocab(root / "vocab.txt")
    args = [f"output_dir={root / 'out'}", *(f"data.{s}={root / s}.tsv" for s in ("train", "dev", "test")),
            "data.max_length=64", f"model.scratch.vocab_file={vocab}", "model.scratch.hidden_size=64",
            "model.scratch.num_layers=2", "model.scratch.num_heads=2", "model.scratch.intermediate_size=128",
            "model.scratch.max_position_embeddings=64", "train.epochs=3", "train.batch_size=16",
            "train.optimizer.learning_rate=2e-3"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    assert main(["export", "--model", str(root / "out" / "best"), "--output", str(root / "export")]) == 0
    return root / "export", root / "test.tsv"


def test_int8_keeps_the_accuracy_and_only_onnx_runtime_serves_it(trained_export, tmp_path, capsys):
    from paddle_ft.cli import main

    export, test = trained_export
    assert main(["quantize", "--export", str(export), "--data", str(test), "--output", str(tmp_path / "int8")]) == 0
    assert "quantized to" in capsys.readouterr().out
    check = json.loads((tmp_path / "int8" / "export.json").read_text(encoding="utf-8"))["quantization"]
    assert check["method"] == "dynamic" and check["texts"] == 300
    assert check["accuracy_fp32"] > 0.9 and check["accuracy_fp32"] - check["accuracy_int8"] <= 0.01, check
    assert check["agreement"] >= 0.98 and check["max_probability_difference"] < 0.1
    assert (tmp_path / "int8" / "model.onnx").stat().st_size < (export / "model.onnx").stat().st_size / 2
    assert main(["verify", str(tmp_path / "int8")]) == 0  # its own manifest, over the int8 graph
    assert "int8" in (tmp_path / "int8" / "MODEL_CARD.md").read_text(encoding="utf-8")
    predictor = Predictor(tmp_path / "int8", PredictOptions(cpu_threads=1))
    assert predictor.backend == "onnxruntime" and predictor.predict(["好棒"])[0].label == "正面"
    with pytest.raises(UserError, match="is quantized to int8 for ONNX Runtime .*: serve it with backend onnxruntime"):
        Predictor(tmp_path / "int8", PredictOptions(cpu_threads=1, backend="paddle"))
    with pytest.raises(UserError, match="is already quantized; quantize the fp32 export it came from"):
        quantize_export(tmp_path / "int8", test, tmp_path / "again")


def test_static_quantization_calibrates_on_the_given_texts(trained_export, tmp_path):
    export, test = trained_export
    with pytest.raises(UserError, match="--method static fixes activation ranges from real texts: give --calibration"):
        quantize_export(export, test, tmp_path / "static", method="static")
    check = quantize_export(export, test, tmp_path / "static", method="static", calibration=test)
    assert check["method"] == "static" and check["accuracy_fp32"] - check["accuracy_int8"] <= 0.01, check


def test_a_larger_accuracy_drop_than_allowed_writes_nothing(trained_export, tmp_path, monkeypatch):
    import paddle_ft.inference.quantize as quantize

    export, test = trained_export
    real = quantize._compare
    monkeypatch.setattr(quantize, "_compare", lambda *a: {**real(*a), "accuracy_int8": 0.5})
    with pytest.raises(AccuracyDropped, match=r"points lost, more than --max-drop 1; nothing was written"):
        quantize_export(export, test, tmp_path / "int8")
    assert not (tmp_path / "int8").exists()


def test_an_export_without_onnx_cannot_be_quantized(trained_export, tmp_path):
    from paddle_ft.cli import main

    export, test = trained_export
    best = export.parent / "out" / "best"
    assert main(["export", "--model", str(best), "--output", str(tmp_path / "plain"), "--no-onnx"]) == 0
    with pytest.raises(UserError, match="has no model.onnx to quantize"):
        quantize_export(tmp_path / "plain", test, tmp_path / "int8")


def test_equal_accuracy_with_different_answers_is_refused(trained_export, tmp_path, monkeypatch):
    """Issue 27, root 4: accuracy can stay equal while a third of the answers change."""
    import paddle_ft.inference.quantize as quantize

    export, test = trained_export
    real = quantize._compare
    monkeypatch.setattr(quantize, "_compare", lambda *a: {**real(*a), "agreement": 0.67})
    with pytest.raises(AccuracyDropped, match=r"int8 gives the fp32 model's answer on 67.00% of the 300 texts of .*, "
                                              r"less than --min-agreement 0.99; nothing was written"):
        quantize_export(export, test, tmp_path / "int8")
    assert not (tmp_path / "int8").exists()


@pytest.mark.slow  # starts a server
def test_an_int8_export_served_with_device_gpu_runs_on_the_cpu_and_says_so(trained_export, tmp_path):
    """Issue 28: the image serves with DEVICE=gpu, where an int8 export never became ready (/readyz 503 forever)."""
    import httpx

    from bench.server_process import ServerProcess

    export, test = trained_export
    quantize_export(export, test, tmp_path / "int8")
    server = ServerProcess(tmp_path / "int8", tmp_path / "server.log", "--device", "gpu", "--threads", "1")
    try:
        assert httpx.post(f"{server.url}/v1/classify", json={"texts": ["好棒"]}).status_code == 200
    finally:
        assert server.stop() == 0
    assert "is an int8 export, which runs on ONNX Runtime on the CPU only: serving it on the CPU" in \
        (tmp_path / "server.log").read_text()


def test_the_precision_check_scores_and_times_each_precision_against_fp32(trained_export, tmp_path, capsys,
                                                                          monkeypatch):
    from paddle_ft.cli import main
    from paddle_ft.inference import precision_check
    from paddle_ft.inference.quantize import labelled_accuracy
    from paddle_ft.runtime import cpu_supports_bf16

    export, test = trained_export
    check = precision_check.check_precisions(export, test, threads=1)
    names = [row.precision for row in check.rows]
    assert names == (["fp32", "bf16", "int8"] if cpu_supports_bf16() else ["fp32", "int8"])
    fp32, int8 = check.rows[0], check.rows[-1]
    assert check.texts == 300 and fp32.agreement == 1.0 and all(row.texts_per_s > 0 for row in check.rows)
    assert fp32.accuracy == labelled_accuracy(Predictor(export), test)[0]
    assert int8.agreement >= 0.98 and abs(int8.accuracy - fp32.accuracy) <= 0.01
    assert f"--output {export}-int8" in int8.use
    lines = check.lines()
    assert lines[0] == "precision check on 300 labelled texts, batches of 32:"
    assert lines[-1].startswith("recommended: ")

    # from the command line; a CPU without bf16 says why it was not measured
    monkeypatch.setattr(precision_check, "cpu_supports_bf16", lambda: False)
    assert main(["export", "--model", str(export.parent / "out" / "best"), "--output", str(tmp_path / "again"),
                 "--check-precision", str(test)]) == 0
    printed = capsys.readouterr().out
    assert "  bf16: not measured, this CPU has neither AVX512-BF16 nor AMX-BF16" in printed
    assert "  int8: accuracy " in printed and "\nrecommended: " in printed


def test_the_recommendation_is_the_fastest_precision_whose_answers_hold():
    from paddle_ft.inference.precision_check import PrecisionCheck, PrecisionRow

    fp32 = PrecisionRow("fp32", 0.850, 1.0, 100.0, "the default")

    def check(*rows):
        return PrecisionCheck((fp32, *rows), 1000, ())

    bf16 = PrecisionRow("bf16", 0.846, 0.995, 190.0, "--precision bf16")
    int8 = PrecisionRow("int8", 0.850, 0.99, 210.0, "quantize")
    assert check(bf16, int8).recommended is int8
    lossy = PrecisionRow("int8", 0.844, 0.995, 210.0, "quantize")  # 0.6 points lost: more than 0.5
    assert check(bf16, lossy).recommended is bf16
    different = PrecisionRow("int8", 0.850, 0.985, 210.0, "quantize")  # same accuracy, other answers on 1.5%
    assert check(different).recommended is fp32
    slow = PrecisionRow("bf16", 0.850, 1.0, 115.0, "--precision bf16")  # 1.15x: within the noise
    assert check(slow).recommended is fp32
    assert check(bf16, int8).lines()[-1] == "recommended: int8, 2.10x fp32 with accuracy held: quantize"
    assert check(bf16, lossy).lines()[2] == \
        "  bf16: accuracy 0.8460 (-0.40 points), fp32's answer on 99.50%, 190.0 texts/s (1.90x fp32)"
    assert check(slow).lines()[-1].startswith("recommended: fp32 (no reduced precision kept accuracy within 0.5")


def test_a_precision_check_without_its_file_or_its_onnx_graph_is_refused(trained_export, tmp_path, capsys):
    from paddle_ft.cli import main

    export, test = trained_export
    best = str(export.parent / "out" / "best")
    assert main(["export", "--model", best, "--output", str(tmp_path / "a"), "--check-precision", "nowhere.tsv"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --check-precision nowhere.tsv: no such file; give a labelled file (your dev set)"]
    assert main(["export", "--model", best, "--output", str(tmp_path / "b"), "--check-precision", str(test),
                 "--no-onnx"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --check-precision measures int8 on the ONNX graph, which --no-onnx leaves out: give one"]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
