"""The corpus the measuring tools train on: two classes told apart by mood characters among filler ones, and its
character vocabulary (optionally filled up to a real model's size)."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

from paddle_ft.data.vocab import SPECIAL_TOKENS

MOOD = {"正面": "好棒赞喜爱快美优满意", "负面": "差坏烂慢糟退失望贵破"}
FILLER = "的了是我这个书手机买东西服务质量"
MOOD_SHARE = 0.3  # of a text's characters: enough for a small model to learn the task in a few hundred steps


def write_corpus(folder: Path, train_rows: int, dev_rows: int, vocab_size: int | None = None,
                 lengths: tuple[int, int] = (4, 60)) -> Path:
    """train.tsv, dev.tsv and vocab.txt in `folder` (returned), the labels alternating. With `vocab_size`, the
    vocabulary is filled up to that size with CJK characters, and the fillers are drawn from all of it (a bert-base
    sized embedding that every row of the vocabulary trains)."""
    mood = "".join(MOOD.values())
    fillers = list(FILLER)
    if vocab_size is not None:
        # from the CJK block on (past its end, the Yi syllables: any single characters do)
        extra = (chr(c) for c in itertools.count(0x4E00) if chr(c) not in mood + FILLER)
        fillers += [next(extra) for _ in range(vocab_size - len(SPECIAL_TOKENS) - len(mood) - len(FILLER))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *mood, *fillers]) + "\n", encoding="utf-8")
    rng = random.Random(0)
    for split, count in (("train", train_rows), ("dev", dev_rows)):
        rows = []
        for i in range(count):
            label = list(MOOD)[i % 2]
            text = "".join(rng.choice(MOOD[label]) if rng.random() < MOOD_SHARE else rng.choice(fillers)
                           for _ in range(rng.randint(*lengths)))
            rows.append(f"{text}\t{label}")
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder
