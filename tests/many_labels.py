"""A corpus with thousands of labels, for the suite and `tools/many_labels_bench.py`.

Label `Lnnnnn` is a pair (a, b) of characters from two alphabets (about sqrt(N) each); its texts hold both among
noise. A tiny encoder learns it because every character recurs across many labels' texts; the head still has a
row per label. Multi-label: a text may carry a second label's pair too.
"""
from __future__ import annotations

import math
import random
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
NOISE = [chr(0xAC00 + i) for i in range(40)]  # Hangul syllables: never part of a label


def alphabets(labels: int) -> tuple[list[str], list[str]]:
    side = math.isqrt(labels - 1) + 1
    return [chr(0x4E00 + i) for i in range(side)], [chr(0x4E00 + side + i) for i in range(side)]


def label_name(i: int) -> str:
    return f"L{i:05d}"


def write_corpus(folder: Path, labels: int, rows_per_label: dict[str, int], multi: bool = False,
                 seed: int = 0) -> Path:
    """FOLDER/{split}.tsv with `rows_per_label[split]` rows of each of `labels` labels, and FOLDER/vocab.txt."""
    first, second = alphabets(labels)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL, *first, *second, *NOISE]) + "\n", encoding="utf-8")
    rng = random.Random(seed)
    side = len(first)
    for split, per in rows_per_label.items():
        rows = []
        for label in range(labels):
            for _ in range(per):
                chosen = sorted({label, *([rng.randrange(labels)] if multi and rng.random() < 0.5 else [])})
                chars = [c for i in chosen for c in (first[i // side], second[i % side])]
                chars += [rng.choice(NOISE) for _ in range(4)]
                rng.shuffle(chars)
                rows.append(("".join(chars), ",".join(label_name(i) for i in chosen)))
        rng.shuffle(rows)
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows),
                                             encoding="utf-8")
    return folder
