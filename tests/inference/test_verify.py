"""Manifests and model cards, and `verify`: a fresh copy of an export passes; a one-byte change to the weights, a
tampered export.json, an added file, a changed data file fail, each in one line. best/ records its data files,
config, seed and scores; the export carries them over."""
import json
import shutil

import pytest
from conftest import DEMO, LABELS, export_tiny_model, overrides, tiny_run_args, write_splits, write_vocab

from paddle_ft.cli import main
from paddle_ft.io import file_sha256


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


# ----------------------------------------------------------------------------- a trained model's provenance

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run's folder, its best/ and its export, and the data it was trained and scored on."""
    root = tmp_path_factory.mktemp("trained")
    data = write_splits(root / "data", (240, 60, 60))
    args = tiny_run_args(data, write_vocab(root / "vocab.txt"), root / "run")
    assert main(["train", "-c", DEMO, *overrides(args)]) == 0
    assert main(["export", "--model", str(root / "run" / "best"), "--output", str(root / "export")]) == 0
    return root


def test_best_records_its_data_config_seed_and_scores_with_intervals(trained):
    best = trained / "run" / "best"
    manifest = json.loads((best / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "model" and manifest["seed"] == 42
    assert manifest["config"]["data"]["test"] == str(trained / "data" / "test.tsv")
    assert {split: entry["rows"] for split, entry in manifest["data"].items()} == {"train": 240, "dev": 60, "test": 60}
    assert manifest["data"]["test"]["sha256"] == file_sha256(trained / "data" / "test.tsv")
    results = json.loads((trained / "run" / "results.json").read_text(encoding="utf-8"))
    assert manifest["metrics"]["test"] == results["test"]
    low, high = manifest["metrics"]["test"]["intervals"]["accuracy"]
    assert low <= results["test"]["accuracy"] <= high
    card = (best / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert f"| test | `{trained / 'data' / 'test.tsv'}` | 60 | `{manifest['data']['test']['sha256'][:16]}` |" in card
    assert f"- test (60 texts): accuracy {results['test']['accuracy']:.4f} [{low:.4f}, {high:.4f}]" in card
    # the export carries what training recorded, beside its own parity
    exported = json.loads((trained / "export" / "manifest.json").read_text(encoding="utf-8"))
    assert {key: exported[key] for key in ("seed", "config", "data", "metrics")} == \
        {key: manifest[key] for key in ("seed", "config", "data", "metrics")}
    assert set(exported["parity"]) == {"paddle_inference", "onnxruntime"}


@pytest.mark.parametrize("folder", ["run/best", "export"])
def test_verify_data_scores_a_recorded_file_again(trained, folder, capsys):
    assert main(["verify", str(trained / folder), "--data", str(trained / "data" / "test.tsv")]) == 0
    assert "test.tsv is its test file, unchanged, and accuracy on it is" in capsys.readouterr().out


def test_verify_data_fails_in_one_line_for_a_changed_or_unknown_file(trained, tmp_path, capsys):
    copy = shutil.copytree(trained / "data", tmp_path / "data")
    lines = (copy / "test.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    label = "正面" if "负面" in lines[1] else "负面"
    (copy / "test.tsv").write_text("".join([lines[0], lines[1].rsplit("\t", 1)[0] + f"\t{label}\n", *lines[2:]]),
                                   encoding="utf-8")
    export = trained / "export"
    assert main(["verify", str(export), "--data", str(copy / "test.tsv")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is none of the data files" in err and "its sha256 matches none" in err
    changed = trained / "data" / "test.tsv"  # the recorded path itself, one label changed
    original = changed.read_bytes()
    try:
        shutil.copy(copy / "test.tsv", changed)
        assert main(["verify", str(export), "--data", str(changed)]) == 1
        err = capsys.readouterr().err
        assert err == (f"error: verify: {changed} has changed since the model was trained and scored on it (its "
                       "sha256 differs from the one manifest.json records for test)\n")
    finally:
        changed.write_bytes(original)


def test_verify_data_scores_a_quantized_export_against_its_own_int8_check(trained, tmp_path, capsys):
    test, dev = trained / "data" / "test.tsv", trained / "data" / "dev.tsv"
    int8 = tmp_path / "int8"
    assert main(["quantize", "--export", str(trained / "export"), "--data", str(test), "--output", str(int8)]) == 0
    check = json.loads((int8 / "export.json").read_text(encoding="utf-8"))["quantization"]
    capsys.readouterr()
    assert main(["verify", str(int8), "--data", str(test)]) == 0
    assert f"int8 accuracy on it is {check['accuracy_int8']:.4f} as quantize recorded (fp32: " \
           f"{check['accuracy_fp32']:.4f})" in capsys.readouterr().out
    assert main(["verify", str(int8), "--data", str(dev)]) == 0
    assert f"(quantize checked int8 on {test}, not on this file; fp32's recorded score does not apply)" in \
        capsys.readouterr().out
