"""Reference point for a fine-tuned model: character 1-3-gram TF-IDF + logistic regression (scikit-learn), on the same
files a config trains on, read by paddle_ft's own readers (any format, header or not, the config's columns).

    python tools/baseline_tfidf.py --data data/demo                       # a folder of train/dev/test.tsv
    python tools/baseline_tfidf.py --config my.yaml                       # the files and columns of a config
    python tools/baseline_tfidf.py --train a.csv --dev b.csv --test c.csv [--text-column review --label-column rating]
"""
import argparse
import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def data_config(args):
    """The DataConfig whose files and columns the baseline reads."""
    from paddle_ft.config import DataConfig, load_config

    if args.config:
        config = load_config(args.config)
        if config.task != "single_label":
            raise SystemExit(f"error: {args.config} is a {config.task} task; this baseline scores single labels")
        return config.data
    if args.train:
        files = {"train": args.train, "dev": args.dev, "test": args.test}
    else:
        folder = Path(args.data)
        files = {split: str(folder / f"{split}.tsv") for split in ("train", "dev", "test")}
    return DataConfig(**files, text_column=args.text_column, label_column=args.label_column, labels=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", default="data/demo", help="a folder with train.tsv, dev.tsv and test.tsv")
    source.add_argument("--config", help="a training config: its data files, columns and format")
    source.add_argument("--train", help="the training file (.tsv, .csv or .jsonl)")
    parser.add_argument("--dev", help="with --train: a file to score")
    parser.add_argument("--test", help="with --train: a file to score")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--split", choices=("dev", "test"), action="append",
                        help="the split(s) to score (repeatable; default: every one there is)")
    args = parser.parse_args()
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    from paddle_ft.workflows.build import read_dataset
    from paddle_ft.errors import UserError

    try:  # the reader's row counts to stderr: stdout is the scores alone (make demo prints them on one line)
        with contextlib.redirect_stdout(sys.stderr):
            examples = read_dataset(data_config(args)).examples
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=2)
    classifier = LogisticRegression(C=4.0, max_iter=2000)
    classifier.fit(vectorizer.fit_transform([e.text for e in examples["train"]]),
                   [e.label for e in examples["train"]])
    for split in args.split or [s for s in ("dev", "test") if s in examples]:
        if split not in examples:
            print(f"error: no {split} file given", file=sys.stderr)
            return 2
        labels = [e.label for e in examples[split]]
        predicted = classifier.predict(vectorizer.transform([e.text for e in examples[split]]))
        print(f"{split} accuracy {accuracy_score(labels, predicted):.4f}, "
              f"macro-F1 {f1_score(labels, predicted, average='macro'):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
