"""Reference point for the demo: character 1-3-gram TF-IDF + logistic regression (scikit-learn).

    python tools/baseline_tfidf.py --data data/demo
"""
import argparse
import csv
import sys
from pathlib import Path


def read(path: Path):
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/demo", help="folder with train.tsv, dev.tsv and test.tsv")
    parser.add_argument("--split", choices=("dev", "test"), action="append",
                        help="the split(s) to score (repeatable; default dev and test)")
    args = parser.parse_args()
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    folder = Path(args.data)
    train_texts, train_labels = read(folder / "train.tsv")
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=2)
    classifier = LogisticRegression(C=4.0, max_iter=2000)
    classifier.fit(vectorizer.fit_transform(train_texts), train_labels)
    for split in args.split or ("dev", "test"):
        texts, labels = read(folder / f"{split}.tsv")
        predicted = classifier.predict(vectorizer.transform(texts))
        print(f"{split} accuracy {accuracy_score(labels, predicted):.4f}, "
              f"macro-F1 {f1_score(labels, predicted, average='macro'):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
