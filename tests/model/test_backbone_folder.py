"""Issue 64, root 5: a backbone folder is checked as a whole before use (config.json, the weights, the tokenizer's
kind), each problem one line naming the file and the fix, never a traceback or a wrong model that exits 0."""
import json
import shutil

import pytest
from conftest import DEMO, overrides, synthetic_rows, write_tsv
from e5_file import tiny_e5_folder

from paddle_ft.cli import main
from paddle_ft.errors import UserError
from paddle_ft.models.backbone import check_folder


def _config(folder, **changes):
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


def _truncate(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])


def _wordpiece(folder):
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}}}))


DAMAGES = {
    "no config.json": (lambda folder: (folder / "config.json").unlink(), "config.json is missing"),
    "config.json truncated": (lambda folder: (folder / "config.json").write_text('{"vocab_size": 1'),
                              "config.json is not a JSON object (damaged or truncated)"),
    "no vocab_size": (lambda folder: _config(folder, vocab_size=None), "config.json has no vocab_size"),
    "a vocab_size its table does not have": (lambda folder: _config(folder, vocab_size=77),
                                             "says vocab_size 77 and hidden_size 32: the two files come from"),
    "weights truncated": (_truncate, "model.safetensors is truncated"),
    "weights garbage": (lambda folder: (folder / "model.safetensors").write_bytes(b"\x00" * 64),
                        "is not a safetensors file"),
    "no weights": (lambda folder: (folder / "model.safetensors").unlink(), "holds no weights"),
    "a WordPiece tokenizer.json": (_wordpiece, "is a WordPiece tokenizer (BERT's) and the folder has no vocab.txt"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_backbone_folder_is_one_line_naming_its_file(damage, tmp_path):
    folder = tmp_path / "e5"
    shutil.copytree(tiny_e5_folder(tmp_path), folder)
    check_folder(folder)  # whole, it passes
    change, message = DAMAGES[damage]
    change(folder)
    with pytest.raises(UserError) as refused:
        check_folder(folder)
    assert message in str(refused.value) and str(folder) in str(refused.value)


def test_train_and_trim_vocab_refuse_a_damaged_backbone_before_any_work(tmp_path, capsys):
    folder = tmp_path / "e5"
    shutil.copytree(tiny_e5_folder(tmp_path), folder)
    _config(folder, vocab_size=77)
    train = write_tsv(tmp_path / "train.tsv", synthetic_rows(8))
    assert main(["train", "-c", DEMO, *overrides([f"output_dir={tmp_path / 'run'}", f"data.train={train}",
                                                 "data.dev=null", "data.test=null", f"model.backbone={folder}",
                                                 "model.scratch=null", f"model.cache_dir={tmp_path / 'cache'}"])]) == 2
    assert "says vocab_size 77" in capsys.readouterr().err
    assert main(["trim-vocab", "--backbone", str(folder), "--data", str(train), "--output",
                 str(tmp_path / "trimmed")]) == 2
    err = capsys.readouterr().err
    assert "says vocab_size 77" in err and "Traceback" not in err and not (tmp_path / "trimmed").exists()


def test_a_full_disk_inside_safetensors_is_told_as_a_full_disk(tmp_path, monkeypatch, capsys):
    """safetensors raises its own SafetensorError, an OSError's message inside: it was a traceback."""
    import safetensors.numpy
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                              'left on device" })')

    folder, train = tiny_e5_folder(tmp_path), write_tsv(tmp_path / "train.tsv", synthetic_rows(8))
    monkeypatch.setattr(safetensors.numpy, "save_file", full)
    assert main(["trim-vocab", "--backbone", str(folder), "--data", str(train), "--output",
                 str(tmp_path / "trimmed")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "disk is full" in err
    assert not (tmp_path / "trimmed").exists()
