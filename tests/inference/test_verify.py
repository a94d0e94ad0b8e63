"""An export's manifest and model card, and `verify`: a fresh copy passes; a one-byte change to the weights, a
tampered export.json or an added file fail, each in one line."""
import json
import shutil

import pytest
from conftest import LABELS, export_tiny_model

from paddle_ft.cli import main


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return export_tiny_model(tmp_path_factory.mktemp("verify") / "model")


def test_the_export_carries_a_manifest_and_a_model_card(export):
    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    info = json.loads((export / "export.json").read_text(encoding="utf-8"))
    on_disk = sorted(p.name for p in export.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == on_disk and {"MODEL_CARD.md", "manifest.json"} <= set(info["files"])
    assert manifest["kind"] == "export" and manifest["versions"]["paddle"] and manifest["versions"]["paddle_build"]
    card = (export / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert card.startswith(f"# Model card: {export.name}\n")
    assert f"into 2 labels: {', '.join(LABELS)}" in card
    assert f"Paddle Inference: {info['parity_max_abs_diff']:.3g}" in card and "python -m paddle_ft verify" in card


def test_verify_passes_on_a_fresh_copy(export, tmp_path, capsys):
    copy = shutil.copytree(export, tmp_path / "copy")
    assert main(["verify", str(copy)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"verified {copy}: its ") and "Paddle Inference and ONNX Runtime agree to" in out


def one_byte_changed(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, named", [
    (lambda d: one_byte_changed(d / "model.pdiparams"), "model.pdiparams has changed since it was written"),
    (lambda d: (d / "export.json").write_text((d / "export.json").read_text().replace("负面", "中性")),
     "export.json has changed since it was written"),
    (lambda d: (d / "notes.txt").write_text("x"), "notes.txt is not in manifest.json: it was added afterwards"),
    (lambda d: (d / "vocab.txt").unlink(), "vocab.txt is missing"),
])
def test_verify_fails_in_one_line_for_each_difference(export, tmp_path, capsys, damage, named):
    copy = shutil.copytree(export, tmp_path / "copy")
    damage(copy)
    assert main(["verify", str(copy)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: verify: {copy}/") and named in err


def test_verify_without_a_manifest_says_what_to_do(export, tmp_path, capsys):
    copy = shutil.copytree(export, tmp_path / "copy")
    (copy / "manifest.json").unlink()
    assert main(["verify", str(copy)]) == 2
    assert "has no manifest.json" in capsys.readouterr().err
