"""trim-vocab: a backbone keeping only the pieces some texts use computes what the full one computes on them, reads an
unseen piece as <unk> (which the [UNK] check reports), and stays a folder transformers reads."""
import json
import subprocess

import numpy as np
import paddle
import pytest

from conftest import ROOT, synthetic_rows, write_tsv
from e5_file import tiny_e5_folder, tiny_pieces
from paddle_ft.models.backbone import load_encoder, resolve
from paddle_ft.cli import main
from paddle_ft.errors import UserError
from paddle_ft.text import pad_ids
from paddle_ft.tokenization import load_tokenizer
from paddle_ft.models.trim import TRIM_INFO, trim_folder

PEER = ROOT / ".venv-peers" / "bin" / "python"
SEEN = ["手机质量好", "服务差，失望", "hello world"]


def hidden_states(folder, texts, cache):
    tokenizer = load_tokenizer(folder)
    encoder, _ = load_encoder(resolve(str(folder), str(cache), print))
    encoder.eval()
    ids = tokenizer(texts, max_length=32)["input_ids"]
    rows, _ = pad_ids(ids, [[0]] * len(ids), tokenizer.pad_token_id)
    with paddle.no_grad():
        return ids, encoder(paddle.to_tensor(rows))[0].numpy(), rows != tokenizer.pad_token_id


def test_a_trimmed_backbone_computes_what_the_full_one_does_on_the_texts_it_kept(tmp_path):
    full = tiny_e5_folder(tmp_path)
    report = trim_folder(full, SEEN, tmp_path / "trimmed", keep_top=5)
    assert report.pieces_before == len(tiny_pieces()[0]) and report.pieces_after == len(report.kept_ids) < 40
    ids, hidden, real = hidden_states(full, SEEN, tmp_path / "cache")
    trimmed_ids, trimmed_hidden, _ = hidden_states(tmp_path / "trimmed", SEEN, tmp_path / "cache")
    assert [[report.kept_ids[i] for i in row] for row in trimmed_ids] == ids  # the same pieces, renumbered
    assert np.abs(hidden[real] - trimmed_hidden[real]).max() <= 1e-5
    config = json.loads((tmp_path / "trimmed" / "config.json").read_text())
    assert config["vocab_size"] == report.pieces_after
    assert json.loads((tmp_path / "trimmed" / TRIM_INFO).read_text())["kept_ids"] == report.kept_ids
    # issue 63: init named the table's rows, trim-vocab the tokenizer's pieces; both are said, each by its name
    rows = json.loads((full / "config.json").read_text())["vocab_size"]
    assert report.rows_before == rows and report.describe().endswith(f"its embedding table {rows:,} -> "
                                                                     f"{report.pieces_after:,} rows")


def test_an_unseen_piece_is_read_as_unk_and_reported(tmp_path, capsys):
    rows = synthetic_rows(64)
    write_tsv(tmp_path / "train.tsv", rows)
    assert main(["trim-vocab", "--backbone", str(tiny_e5_folder(tmp_path)), "--data", str(tmp_path / "train.tsv"),
                 "--output", str(tmp_path / "trimmed"), "--keep-top", "0"]) == 0
    assert "kept" in capsys.readouterr().out
    tokenizer = load_tokenizer(tmp_path / "trimmed")
    assert tokenizer.unk_token_id in tokenizer.pieces(["hello"])[0]  # "hello" is in no training text
    from paddle_ft.analysis.audit import unknown_shares

    encoded = tokenizer(["hello world", rows[0][0]], max_length=None)["input_ids"]
    tokens, texts = unknown_shares(encoded, tokenizer.unk_token_id)
    assert tokens > 0 and texts == 0.5


def test_refusals_are_one_line(tmp_path, capsys):
    from conftest import write_vocab

    wordpiece = tmp_path / "wp"
    wordpiece.mkdir()
    write_vocab(wordpiece / "vocab.txt")
    (wordpiece / "config.json").write_text('{"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1, '
                                           '"num_attention_heads": 1}')
    (wordpiece / "model_state.pdparams").write_bytes(b"")  # a whole folder, as far as what is checked before
    write_tsv(tmp_path / "t.tsv", synthetic_rows(4))
    assert main(["trim-vocab", "--backbone", str(wordpiece), "--data", str(tmp_path / "t.tsv"), "--output",
                 str(tmp_path / "x")]) == 2
    assert "trims SentencePiece vocabularies" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "f").write_text("x")
    assert main(["trim-vocab", "--backbone", str(tiny_e5_folder(tmp_path)), "--data", str(tmp_path / "t.tsv"),
                 "--output", str(tmp_path / "busy")]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    with pytest.raises(UserError, match="trim-vocab trims"):
        trim_folder(wordpiece, ["x"], tmp_path / "y", 0)


@pytest.mark.slow  # a child process with torch
def test_transformers_reads_a_trimmed_folder_as_paddle_ft_does(tmp_path):
    trimmed = tmp_path / "trimmed"
    trim_folder(tiny_e5_folder(tmp_path), SEEN, trimmed, keep_top=5)
    ids, hidden, real = hidden_states(trimmed, SEEN, tmp_path / "cache")
    rows, _ = pad_ids(ids, [[0]] * len(ids), 1)
    (tmp_path / "request.json").write_text(json.dumps({"texts": SEEN, "input_ids": rows.tolist()}))
    done = subprocess.run([str(PEER), str(ROOT / "tests" / "hf_e5_reference.py"), str(trimmed),
                           str(tmp_path / "request.json"), str(tmp_path / "out.npz")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as reference:
        assert json.loads(str(reference["ids"])) == ids
        assert np.abs(reference["hidden"][real] - hidden[real]).max() <= 1e-4


def test_the_unk_warning_of_a_trimmed_backbone_says_to_trim_it_again_with_more_text(tmp_path, capsys):
    """Training on a trimmed backbone whose dev texts use pieces the trim left out: the warning names the trim and its
    source, not "pick another model"."""
    train = write_tsv(tmp_path / "train.tsv", synthetic_rows(64))
    dev = write_tsv(tmp_path / "dev.tsv", [("hello world " * 3, label) for _, label in synthetic_rows(8)])
    full = tiny_e5_folder(tmp_path)
    assert main(["trim-vocab", "--backbone", str(full), "--data", str(train), "--output", str(tmp_path / "trimmed"),
                 "--keep-top", "0"]) == 0
    capsys.readouterr()
    settings = [f"model.backbone={tmp_path / 'trimmed'}", f"data.train={train}", f"data.dev={dev}", "data.test=null",
                "data.max_length=48", "train.max_steps=2", f"output_dir={tmp_path / 'run'}"]
    assert main(["train", "--config", str(ROOT / "configs" / "demo.yaml"),
                 *(part for setting in settings for part in ("-o", setting))]) == 0
    warning = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: dev: "))
    assert "the backbone's vocabulary was trimmed to the pieces 64 texts use" in warning
    assert f"trim {full} again with more of your text (python -m paddle_ft trim-vocab --backbone {full}" in warning
