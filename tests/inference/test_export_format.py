"""docs/export-format.md's code, run as written in a fresh interpreter without paddle_ft: it loads best/ with
PaddleNLP, and the export with plain Paddle Inference and ONNX Runtime, with paddle_ft's answers."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, export_tiny_model

from paddle_ft.inference.options import PredictOptions

from paddle_ft.inference.predictor import Predictor, stack_probabilities
from paddle_ft.text import softmax

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "export-format.md").read_text(encoding="utf-8"), re.S)
TEXTS = ["这个服务太差了", "质量很好"]  # the texts the documented code classifies


def run_as_a_user(code: str, **variables: str) -> dict:
    """`code` after the variables it names, in a new interpreter; what it computed, and whether it used paddle_ft."""
    prelude = "".join(f"{name} = {value!r}\n" for name, value in variables.items())
    report = ("\nimport sys, json as _json\nprint(_json.dumps({'logits': logits.tolist() if 'logits' in dir() else None,"
              " 'answers': answers if 'answers' in dir() else None,"
              " 'paddle_ft': any(m.startswith('paddle_ft') for m in sys.modules)}))")
    done = subprocess.run([sys.executable, "-c", prelude + code + report], capture_output=True, text=True, timeout=300,
                          cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return export_tiny_model(tmp_path_factory.mktemp("export-format") / "model")


def test_the_document_shows_paddlenlp_paddle_inference_and_onnx_runtime():
    assert len(BLOCKS) == 3 and "AutoModelForSequenceClassification" in BLOCKS[0]
    assert "inference.create_predictor" in BLOCKS[1] and "onnxruntime.InferenceSession" in BLOCKS[2]


@pytest.mark.slow
@pytest.mark.parametrize("block", [1, 2], ids=["paddle-inference", "onnxruntime"])
def test_the_documented_code_reads_the_export_as_paddle_ft_does(export, block):
    got = run_as_a_user(BLOCKS[block], EXPORT=str(export))
    assert got["paddle_ft"] is False
    predictor = Predictor(export, PredictOptions(backend="paddle"))
    expected = stack_probabilities(predictor.predict(TEXTS))
    np.testing.assert_allclose(softmax(np.array(got["logits"], dtype=np.float32)), expected, atol=1e-5)
    assert got["answers"] == [p.label for p in predictor.predict(TEXTS)]


@pytest.mark.slow
def test_the_documented_code_loads_best_with_paddlenlp(export):
    best = json.loads((export / "export.json").read_text(encoding="utf-8"))["source_model"]
    got = run_as_a_user(BLOCKS[0] + "\nassert type(model).__name__ == 'BertForSequenceClassification'\n", BEST=best)
    assert got["paddle_ft"] is False


def test_the_export_names_its_output_logits_and_its_onnx_axes_batch_and_sequence(export):
    import onnx
    from paddle import inference

    config = inference.Config(str(export / "model.json"), str(export / "model.pdiparams"))
    config.disable_gpu()
    predictor = inference.create_predictor(config)
    assert predictor.get_input_names() == ["input_ids", "token_type_ids"]
    assert predictor.get_output_names() == ["logits"]
    graph = onnx.load(str(export / "model.onnx")).graph
    axes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output]}
    assert axes == {"input_ids": ["batch", "sequence"], "token_type_ids": ["batch", "sequence"], "logits": ["batch", 2]}
    assert json.loads((export / "export.json").read_text(encoding="utf-8"))["outputs"] == ["logits"]
