"""The demo's pretrained encoder, shipped in models/demo-encoder/ so that `make demo-tiny` fine-tunes at once.

    python tools/demo_encoder.py compare    # after make pretrain-demo: its held-out masked accuracy beside the shipped one
    python tools/demo_encoder.py ship       # replace the shipped encoder with out/pretrain-demo/best, with its manifest

The manifest says how the encoder was made: the recipe (the sha256 of its settings) and the corpus and vocabulary
it read (with their sha256), the
held-out masked accuracy, the versions and the commit.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from paddle_ft.artifacts.run import RunFiles  # noqa: E402
from paddle_ft.io import file_sha256  # noqa: E402

SHIPPED = ROOT / "models" / "demo-encoder"
RUN = ROOT / "out" / "pretrain-demo"
RECIPE = ROOT / "configs" / "pretrain-demo.yaml"
CORPUS, VOCAB = ROOT / "data" / "demo" / "unlabeled.txt", ROOT / "data" / "demo" / "vocab.txt"
MANIFEST = "manifest.json"
ENCODER_FILES = ("config.json", "model_state.pdparams", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json")  # the encoder; pretraining's own heads stay behind


def settings_sha256(recipe: Path) -> str:
    """The sha256 of a recipe's settings as training reads them (every key, defaults filled in), not of its text: an
    edited comment leaves the shipped encoder the recipe's."""
    from paddle_ft.config import config_to_dict, load_config

    settings = json.dumps(config_to_dict(load_config(recipe)), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(settings.encode("utf-8")).hexdigest()


def held_out(run: Path) -> dict:
    dev = RunFiles(run).read_results().dev
    return {"masked_accuracy": round(dev["masked_accuracy"], 4), "perplexity": round(dev["perplexity"], 2)}


def compare() -> int:
    shipped = json.loads((SHIPPED / MANIFEST).read_text(encoding="utf-8"))
    made = held_out(RUN)
    print(f"held-out masked accuracy: {made['masked_accuracy']:.4f} made now (out/pretrain-demo/best), "
          f"{shipped['held_out']['masked_accuracy']:.4f} shipped (models/demo-encoder); perplexity "
          f"{made['perplexity']:.2f} vs {shipped['held_out']['perplexity']:.2f}")
    same_data = (file_sha256(CORPUS) == shipped["corpus"]["sha256"]
                 and file_sha256(VOCAB) == shipped["vocabulary"]["sha256"])
    print("the same corpus and vocabulary as the shipped encoder's" if same_data else
          "a different corpus or vocabulary from the shipped encoder's: the numbers are not comparable run to run")
    return 0


def ship() -> int:
    import paddle

    best = RunFiles(RUN).best_dir
    if SHIPPED.exists():
        shutil.rmtree(SHIPPED)
    SHIPPED.mkdir(parents=True)
    for name in ENCODER_FILES:
        shutil.copy2(best / name, SHIPPED / name)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    manifest = {
        "made_by": "make pretrain-demo, then python tools/demo_encoder.py ship",
        "recipe": {"file": str(RECIPE.relative_to(ROOT)), "settings_sha256": settings_sha256(RECIPE)},
        "corpus": {"file": str(CORPUS.relative_to(ROOT)), "sha256": file_sha256(CORPUS),
                   "texts": len(CORPUS.read_text(encoding="utf-8").splitlines())},
        "vocabulary": {"file": str(VOCAB.relative_to(ROOT)), "sha256": file_sha256(VOCAB)},
        "held_out": held_out(RUN),
        "weights_sha256": file_sha256(SHIPPED / "model_state.pdparams"),
        "versions": {"python": platform.python_version(), "paddle": paddle.__version__},
        "commit": commit,
    }
    (SHIPPED / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"shipped {best} as {SHIPPED} ({sum(p.stat().st_size for p in SHIPPED.iterdir()) / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("compare", "ship"))
    sys.exit({"compare": compare, "ship": ship}[parser.parse_args().action]())
