"""Tiny fixtures: a character vocabulary, a 2-layer 32-wide BERT, and a learnable synthetic corpus."""
from __future__ import annotations

import atexit
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from paddle_ft import runtime

# one math thread per test process, in-process runs and the child processes (which inherit it) alike: the workers
# share the cores, and a run compared bit for bit with one in a child process computes with the same threads
os.environ.setdefault("OMP_NUM_THREADS", "1")
runtime.configure()

import paddle  # noqa: E402

from paddle_ft.data.vocab import SPECIAL_TOKENS  # noqa: E402
from paddle_ft.models.networks import BERTForTextClassification, scratch_encoder  # noqa: E402

POSITIVE_CHARS = "好棒赞喜爱快美优满意"
NEGATIVE_CHARS = "差坏烂慢糟退失望贵破"
NEUTRAL_CHARS = "的了是我这个书手机买东西服务质量"
LABELS = ("负面", "正面")
ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "tools"))  # the measuring tools (tools/bench/), outside the library; last: no shadowing
DEMO = str(ROOT / "configs" / "demo-scratch.yaml")


def overrides(args: list[str]) -> list[str]:
    """["a=1", "b=2"] -> ["-o", "a=1", "-o", "b=2"]."""
    return [item for arg in args for item in ("-o", arg)]


def count_tensor_reads(monkeypatch) -> dict:
    """Counts reads of a tensor's value on the host (numpy, item, float, bool, int, tolist; a read inside another
    counts once) while counts["on"] is true: each is a sync with the device on a GPU."""
    counts = {"on": False, "inside": False, "reads": 0}
    for name in ("numpy", "item", "__float__", "__bool__", "__int__", "tolist"):
        def read(self, *args, _real=getattr(paddle.Tensor, name), **kwargs):
            outer = not counts["inside"]
            counts["reads"] += counts["on"] and outer
            counts["inside"] = True
            try:
                return _real(self, *args, **kwargs)
            finally:
                counts["inside"] = not outer
        monkeypatch.setattr(paddle.Tensor, name, read)
    return counts


def features_of(rows, tokenizer, max_length: int = 64):
    """Token ids of synthetic (text, label) rows, labelled with LABELS."""
    from paddle_ft.data.features import tokenize
    from paddle_ft.data.labels import LabelMap
    from paddle_ft.data.readers import Example

    examples = [Example(text, None, label, i + 2) for i, (text, label) in enumerate(rows)]
    return tokenize(examples, tokenizer, max_length, LabelMap(LABELS))


def tiny_meta(**fields):
    """The `ModelMeta` of the tiny test models: LABELS, max length 64, no dropout."""
    from paddle_ft.artifacts.meta import ModelMeta

    return ModelMeta(**{"labels": LABELS, "max_length": 64, "dropout": 0.0, **fields})


def synthetic_rows(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Texts whose label is told by which mood characters they contain, lengths 4 to 40."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = LABELS[i % 2]
        mood = POSITIVE_CHARS if label == "正面" else NEGATIVE_CHARS
        length = rng.randint(4, 40)
        text = "".join(rng.choice(mood if rng.random() < 0.3 else NEUTRAL_CHARS) for _ in range(length))
        rows.append((text, label))
    return rows


def write_tsv(path: Path, rows, header=("text", "label")) -> Path:
    lines = ["\t".join(header)] + ["\t".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_vocab(path: Path) -> Path:
    """The character vocabulary of the synthetic corpus, special tokens first."""
    chars = sorted(set(POSITIVE_CHARS + NEGATIVE_CHARS + NEUTRAL_CHARS))
    path.write_text("\n".join([*SPECIAL_TOKENS, *chars]) + "\n", encoding="utf-8")
    return path


def write_splits(folder: Path, sizes: tuple[int, int, int]) -> Path:
    """train/dev/test TSV files of the synthetic corpus with these many rows (seeds 1, 2, 3)."""
    folder.mkdir(parents=True, exist_ok=True)
    for (split, seed), n in zip((("train", 1), ("dev", 2), ("test", 3)), sizes):
        write_tsv(folder / f"{split}.tsv", synthetic_rows(n, seed=seed))
    return folder


@pytest.fixture(scope="session", autouse=True)
def route_cache(tmp_path_factory) -> None:
    """The routes backend auto measures (inference/routing.py) kept for the session (its processes included), not
    in the user's home: a test sees only routes this session measured."""
    from paddle_ft.inference.routing import CACHE_VARIABLE

    os.environ[CACHE_VARIABLE] = str(tmp_path_factory.mktemp("routes"))


@pytest.fixture(autouse=True)
def in_an_empty_working_folder(tmp_path_factory, monkeypatch) -> Path:
    """Every test runs in a new, empty working folder: a relative path a test names (out/pretrain-demo/best,
    ./encoder) never meets what a user's commands left in the checkout (make demo, then make test)."""
    folder = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def vocab_file(tmp_path) -> Path:
    return write_vocab(tmp_path / "vocab.txt")


@pytest.fixture
def tokenizer(vocab_file):
    from paddlenlp.transformers import BertTokenizer

    return BertTokenizer(str(vocab_file))


@pytest.fixture
def make_model(tokenizer):
    """A fresh tiny classifier; dropout 0 unless asked, so equivalence tests are exact."""

    def make(seed: int = 0, dropout: float = 0.0, architecture: str = "bert") -> BERTForTextClassification:
        paddle.seed(seed)
        encoder = scratch_encoder(architecture, len(tokenizer.vocab), hidden_size=32, num_layers=2, num_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, dropout=dropout,
                                  pad_token_id=tokenizer.pad_token_id)
        return BERTForTextClassification(encoder, num_classes=2, dropout=dropout)

    return make


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """train/dev/test TSV files of the synthetic corpus."""
    return write_splits(tmp_path / "data", (240, 60, 60))


@pytest.fixture
def tiny_config_args(data_dir, vocab_file, tmp_path) -> list[str]:
    """`-o` overrides that make configs/demo-scratch.yaml train the tiny model on the synthetic corpus."""
    return tiny_run_args(data_dir, vocab_file, tmp_path / "out")


def tiny_run_args(data_dir: Path, vocab_file: Path, output_dir: Path) -> list[str]:
    return [f"output_dir={output_dir}", f"data.train={data_dir / 'train.tsv'}",
            f"data.dev={data_dir / 'dev.tsv'}", f"data.test={data_dir / 'test.tsv'}", "data.max_length=64",
            f"model.scratch.vocab_file={vocab_file}", "model.scratch.hidden_size=32", "model.scratch.num_layers=2",
            "model.scratch.num_heads=2", "model.scratch.intermediate_size=64",
            "model.scratch.max_position_embeddings=64", "train.epochs=3", "train.batch_size=16",
            "train.optimizer.learning_rate=3e-3", "train.runtime.log_every=5"]


def train_tiny(root: Path, sizes: tuple[int, int, int] = (120, 40, 40)) -> tuple[Path, Path]:
    """The tiny model trained by the `train` command (so its best/ records its config and data) for one epoch on the
    synthetic corpus in `root`/data: (root/out/best, root/data)."""
    from paddle_ft.cli import main

    data = write_splits(root / "data", sizes)
    write_vocab(data / "vocab.txt")
    args = [*tiny_run_args(data, data / "vocab.txt", root / "out"), "train.epochs=1",
            "train.runtime.write_report=false"]
    assert main(["train", "-c", DEMO, *overrides(args)]) == 0
    return root / "out" / "best", data


def pytest_collection_modifyitems(config, items):
    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and paddlepaddle-gpu")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def export_tiny_model(folder: Path, seed: int = 5, text_pair_column: str | None = None) -> Path:
    """A tiny model with the conftest vocabulary, saved and exported; returns the export folder. With
    `text_pair_column` it is a text-pair model. Made once per process and kind, then copied: the same seed makes the
    same weights, so a copy is what making it again would write (and the tests may change their copy)."""
    made = _TINY_MODELS.get((seed, text_pair_column))
    if made is None or not made.is_dir():
        scratch = tempfile.mkdtemp(prefix="paddle_ft-tiny-model-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        made = Path(scratch) / "model"
        _make_tiny_model(made, seed, text_pair_column)
        _TINY_MODELS[(seed, text_pair_column)] = made
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(made, folder, dirs_exist_ok=True, symlinks=True)
    return folder / "export"


_TINY_MODELS: dict[tuple[int, str | None], Path] = {}


def _make_tiny_model(folder: Path, seed: int, text_pair_column: str | None) -> None:
    from paddlenlp.transformers import BertTokenizer

    from paddle_ft.artifacts.bundle import save_bundle
    from paddle_ft.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = BertTokenizer(str(write_vocab(folder / "vocab.txt")))
    paddle.seed(seed)
    encoder = scratch_encoder("bert", len(tokenizer.vocab), hidden_size=32, num_layers=2, num_heads=2,
                              intermediate_size=64, max_position_embeddings=64, dropout=0.0,
                              pad_token_id=tokenizer.pad_token_id)
    best = folder / "best"
    save_bundle(best, BERTForTextClassification(encoder, num_classes=2, dropout=0.0), tokenizer,
                tiny_meta(text_pair_column=text_pair_column))
    export_model(best, folder / "export")
