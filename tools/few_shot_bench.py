"""Few labels or none, measured on a real sentence encoder (multilingual-e5-small, trimmed), in one run:

    python tools/few_shot_bench.py [--backbone out/e5-small-demo-trimmed] [--output out/few-shot-bench]
                                   [--phases zero_shot,few_shot,add_class] [--sizes 8,16,32] [--draws 5]

- zero_shot: `init --labels` + `train` with no training row, on the demo reviews (2 labels) and on the domain task
  (6 labels: hotel / book / laptop x negative / positive, the demo's rows that name exactly one of the three kinds of
  product; `domain_task`), one-line descriptions of each label (`DESCRIPTIONS`); test accuracy.
- few_shot: for each size (rows per class) and each of `--draws` seeded draws of the demo's training file: TF-IDF +
  logistic regression, frozen e5 embeddings + logistic regression, plain fine-tuning with init's recipe
  (`init --recipe fine_tune`), and init's few-shot recipe; test accuracy on the whole demo test file, mean and spread.
- add_class: on the domain task, a prototype head fine-tuned on five labels (`ADD_TRAIN_ROWS` rows each), then
  `add-class` of the sixth from 16 examples: the old labels' accuracy before and after, the new label's recall, and
  the time it took against retraining on all six.

Each child command's log goes to OUTPUT/logs/; OUTPUT/few_shot_bench.json and .md are written after each phase and
each few-shot draw (a later run into the same folder keeps the phases it does not repeat, and a training run that
finished, OUTPUT/runs/NAME/results.json, is not run again: delete OUTPUT to measure everything anew). The machine is
named in the table.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from paddle_ft import runtime  # noqa: E402

# before paddle's import (reading rows imports it, which sets OMP_NUM_THREADS=1 and KMP_* here): the children get
# the environment as the user started the bench (runtime.environment_as_given), not that
runtime.configure()

from bench.folder import bench_output  # noqa: E402

PHASES = ("zero_shot", "few_shot", "add_class")
RESULTS = "few_shot_bench.json"
DEMO = ROOT / "data" / "demo"
DESCRIPTIONS = {
    "demo": {"负面": "顾客对商品或服务不满意的差评，抱怨质量差、服务不好",
             "正面": "顾客对商品或服务满意的好评，称赞质量好、服务周到"},
    "domain": {"酒店负面": "对酒店住宿不满意的差评，抱怨房间、服务或设施",
               "酒店正面": "对酒店住宿满意的好评，称赞房间、服务或位置",
               "书籍负面": "对一本书不满意的差评，批评内容、作者或印刷",
               "书籍正面": "对一本书满意的好评，称赞内容精彩、作者写得好",
               "电脑负面": "对笔记本电脑不满意的差评，抱怨屏幕、电池、散热或系统",
               "电脑正面": "对笔记本电脑满意的好评，称赞性能、屏幕或做工"}}
# the words that name each kind of product; a row naming exactly one kind gets it
DOMAINS = {"酒店": "酒店|宾馆|房间|前台|入住", "书籍": "书|作者|读", "电脑": "电脑|屏幕|电池|键盘|笔记本|硬盘|显卡|散热"}
NEW_LABEL = "电脑正面"
ADD_EXAMPLES = 16
ADD_TRAIN_ROWS = 300  # per label of the five the model is trained on (the whole task has 800-2,400 per label)
ADD_TRAIN = ["model.head=prototype", "model.pooling=mean", "model.text_prefix='query: '", "train.epochs=2",
             "train.batch_size=32", "train.optimizer.learning_rate=7e-5", "train.evaluation.every=0"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="out/e5-small-demo-trimmed", help="make demo writes it")
    parser.add_argument("--output", default="out/few-shot-bench")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"a comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--sizes", default="8,16,32", help="rows per class of the few-shot draws")
    parser.add_argument("--draws", type=int, default=5, help="seeded draws per size")
    args = parser.parse_args()
    with bench_output(args.output) as output:
        (output / "logs").mkdir(parents=True, exist_ok=True)
        results = _earlier(output / RESULTS)
        results["machine"] = machine()
        for phase in args.phases.split(","):
            started = time.perf_counter()
            results[phase] = {"zero_shot": zero_shot, "few_shot": few_shot, "add_class": add_class}[phase](
                args, output, results)
            results[phase]["minutes"] = round((time.perf_counter() - started) / 60, 1)
            print(_write(output, results))
    return 0


# ---------------------------------------------------------------------------------------------- the phases

def zero_shot(args, output: Path, results: dict) -> dict:
    domain = domain_task(output / "data" / "domain")
    scores = {}
    for task, folder in (("demo", DEMO), ("domain", domain)):
        labels = write_descriptions(output / "data" / f"{task}-labels.tsv", DESCRIPTIONS[task])
        config = output / "configs" / f"zero-shot-{task}.yaml"
        init(output, f"zero-shot-{task}", ["--labels", labels, "--backbone", args.backbone, "--test",
                                          folder / "test.tsv"], config)
        scores[task] = train(output, f"zero-shot-{task}", config, [])["test"]["accuracy"]
    return {"test_accuracy": scores, "descriptions": DESCRIPTIONS}


def few_shot(args, output: Path, results: dict) -> dict:
    train_rows = read_rows(DEMO / "train.tsv")
    test_rows = read_rows(DEMO / "test.tsv")
    frozen = FrozenEmbeddings(args.backbone, test_rows)
    table = {}
    for size in map(int, args.sizes.split(",")):
        runs = {"tfidf_lr": [], "frozen_lr": [], "fine_tune": [], "few_shot": []}
        for draw in range(args.draws):
            name = f"{size}-per-class-draw-{draw}"
            rows = drawn(train_rows, size, seed=draw)
            path = write_rows(output / "data" / "draws" / f"{name}.tsv", rows)
            runs["tfidf_lr"].append(tfidf_accuracy(rows, test_rows))
            runs["frozen_lr"].append(frozen.accuracy(rows))
            for recipe in ("fine_tune", "few_shot"):
                config = output / "configs" / f"{recipe}-{name}.yaml"
                init(output, f"{recipe}-{name}", ["--train", path, "--backbone", args.backbone, "--recipe", recipe],
                     config)
                runs[recipe].append(train(output, f"{recipe}-{name}", config, [f"data.test={DEMO / 'test.tsv'}",
                                                                              f"seed={draw}"])["test"]["accuracy"])
            print(f"{size} per class, draw {draw}: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in runs.items()),
                  flush=True)
            table[str(size)] = summary(runs)
            results["few_shot"] = {"test_accuracy": table, "test_rows": len(test_rows), "draws": draw + 1}
            _write(output, results)  # a draw at a time: an interrupted bench keeps what it measured
    return {"test_accuracy": table, "test_rows": len(test_rows), "draws": args.draws}


def summary(runs: dict) -> dict:
    return {method: {"mean": statistics.mean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
                     "runs": values} for method, values in runs.items()}


def add_class(args, output: Path, results: dict) -> dict:
    domain = domain_task(output / "data" / "domain")
    rng = random.Random(0)
    train_rows = read_rows(domain / "train.tsv")
    old = [(t, lab) for t, lab in train_rows if lab != NEW_LABEL]
    five = [row for label in sorted({lab for _, lab in old})
            for row in rng.sample([r for r in old if r[1] == label], ADD_TRAIN_ROWS)]
    six = five + rng.sample([r for r in train_rows if r[1] == NEW_LABEL], ADD_TRAIN_ROWS)
    examples = [text for text, label in rng.sample([r for r in train_rows if r[1] == NEW_LABEL and (r[0], r[1])
                                                    not in set(six)], ADD_EXAMPLES)]
    data = output / "data" / "add-class"
    write_rows(data / "five.tsv", five)
    write_rows(data / "six.tsv", six)
    (data / "examples.txt").write_text("\n".join(examples) + "\n", encoding="utf-8")
    common = [f"data.dev={domain / 'dev.tsv'}", f"data.test={domain / 'test.tsv'}", f"model.backbone={args.backbone}",
              "data.max_length=128", "data.labels=null", *ADD_TRAIN]
    test_rows = read_rows(domain / "test.tsv")
    five_dev = write_rows(data / "dev-five.tsv", [r for r in read_rows(domain / "dev.tsv") if r[1] != NEW_LABEL])
    started = time.perf_counter()
    train(output, "add-class-five", ROOT / "configs" / "demo-e5-long.yaml",
          [f"data.train={data / 'five.tsv'}", *common, f"data.dev={five_dev}", "data.test=null"])
    five_minutes = (time.perf_counter() - started) / 60
    started = time.perf_counter()
    run(output, "add-class", [sys.executable, "-m", "paddle_ft", "add-class", "--model",
                              output / "runs" / "add-class-five" / "best", "--label", NEW_LABEL, "--examples",
                              data / "examples.txt", "--output", output / "runs" / "add-class-six" / "best"], fresh=True)
    add_seconds = time.perf_counter() - started
    change = json.loads((output / "runs" / "add-class-six" / "best" / "manifest.json").read_text(
        encoding="utf-8"))["class_changes"][-1]
    started = time.perf_counter()
    retrained = train(output, "add-class-retrained", ROOT / "configs" / "demo-e5-long.yaml",
                      [f"data.train={data / 'six.tsv'}", *common])
    retrain_minutes = (time.perf_counter() - started) / 60
    old_rows = [i for i, (_, label) in enumerate(test_rows) if label != NEW_LABEL]
    new_rows = [i for i, (_, label) in enumerate(test_rows) if label == NEW_LABEL]
    old_test = [test_rows[i] for i in old_rows]  # the five-label model is scored on its own labels' rows
    before = answers(output, "five", output / "runs" / "add-class-five" / "best", old_test)
    after = answers(output, "six", output / "runs" / "add-class-six" / "best", test_rows)
    return {"old_accuracy_before": _share(before, old_test, range(len(old_test))),
            "old_accuracy_after": _share(after, test_rows, old_rows),
            "new_label_recall": _share(after, test_rows, new_rows), "all_accuracy_after": _share(
                after, test_rows, range(len(test_rows))), "retrained_test_accuracy": retrained["test"]["accuracy"],
            "bias": change["bias"], "reference_rows": change["reference"]["rows"],
            "max_changed": change["reference"]["max_changed"], "add_class_seconds": round(add_seconds, 1), "retrain_minutes": round(retrain_minutes, 1),
            "five_label_training_minutes": round(five_minutes, 1), "new_label": NEW_LABEL, "examples": ADD_EXAMPLES,
            "train_rows_per_label": ADD_TRAIN_ROWS, "test_rows": len(test_rows)}


# ---------------------------------------------------------------------------------------------- data

def domain_task(folder: Path) -> Path:
    """The demo's rows that name exactly one kind of product (`DOMAINS`), labelled kind + sentiment; the demo's own
    split, so no text moves between train and test."""
    for split in ("train", "dev", "test"):
        rows = []
        for text, label in read_rows(DEMO / f"{split}.tsv"):
            kinds = [kind for kind, words in DOMAINS.items() if re.search(words, text)]
            if len(kinds) == 1:
                rows.append((text, kinds[0] + label))
        write_rows(folder / f"{split}.tsv", rows)
    return folder


def read_rows(path: Path) -> list[tuple[str, str]]:
    from paddle_ft.data.readers import Columns, read_examples

    return [(e.text, e.label) for e in read_examples(path, "tsv", Columns("text", None, "label"))[0]]


def write_rows(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("text\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")
    return path


def write_descriptions(path: Path, descriptions: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{label}\t{text}\n" for label, text in descriptions.items()), encoding="utf-8")
    return path


def drawn(rows, size: int, seed: int) -> list[tuple[str, str]]:
    """`size` rows of each label, drawn with `seed`."""
    rng = random.Random(seed)
    return [row for label in sorted({label for _, label in rows})
            for row in rng.sample([r for r in rows if r[1] == label], size)]


# ---------------------------------------------------------------------------------------------- the methods

def tfidf_accuracy(train_rows, test_rows) -> float:
    """tools/baseline_tfidf.py's model (character 1-3-grams, logistic regression C=4), min_df 1: a few rows have
    few repeated n-grams."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=1)
    classifier = LogisticRegression(C=4.0, max_iter=2000)
    classifier.fit(vectorizer.fit_transform([t for t, _ in train_rows]), [lab for _, lab in train_rows])
    predicted = classifier.predict(vectorizer.transform([t for t, _ in test_rows]))
    return sum(p == lab for p, (_, lab) in zip(predicted, test_rows)) / len(test_rows)


class FrozenEmbeddings:
    """The pretrained encoder's mean-pooled, normalised embeddings ("query: " prefix) + logistic regression; the
    test texts are embedded once."""

    def __init__(self, backbone: str, test_rows):
        from paddle_ft.config import ModelConfig
        from paddle_ft.models.networks import BERTForTextClassification
        from paddle_ft.workflows.build import build_encoder, build_tokenizer, resolve_backbone

        model_config = resolve_backbone(ModelConfig(backbone=backbone, pooling="mean", text_prefix="query: "))
        self.tokenizer = build_tokenizer(model_config)
        encoder, _ = build_encoder(model_config, self.tokenizer, 128)
        self.model = BERTForTextClassification(encoder, 2, 0.0, "mean")
        self.test_rows, self.test = test_rows, self.embed([t for t, _ in test_rows])

    def embed(self, texts):
        from paddle_ft.engine.prototypes import text_vectors

        return text_vectors(self.model, self.tokenizer, texts, 128, "texts")

    def accuracy(self, rows) -> float:
        from sklearn.linear_model import LogisticRegression

        classifier = LogisticRegression(C=10.0, max_iter=2000)  # unit vectors: a weak penalty
        classifier.fit(self.embed([t for t, _ in rows]), [lab for _, lab in rows])
        predicted = classifier.predict(self.test)
        return sum(p == lab for p, (_, lab) in zip(predicted, self.test_rows)) / len(self.test_rows)


def answers(output: Path, name: str, best: Path, rows) -> list[str]:
    """The saved model's label for each text, by `eval`'s scoring (its misclassified file names the wrong ones)."""
    data = write_rows(output / "data" / "add-class" / f"scored-{name}.tsv", rows)
    report = json.loads(run(output, f"eval-{name}", [sys.executable, "-m", "paddle_ft", "eval", "--model", best,
                                                      "--data", data]))
    wrong = {}
    for line in Path(report["misclassified_file"]).read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        wrong[int(fields[0])] = fields[3]
    labels = [label for _, label in rows]
    return [wrong.get(i + 2, labels[i]) for i in range(len(rows))]


def _share(predicted, rows, indices) -> float:
    indices = list(indices)
    return sum(predicted[i] == rows[i][1] for i in indices) / len(indices)


# ---------------------------------------------------------------------------------------------- running commands

def init(output: Path, name: str, args: list, config: Path) -> None:
    config.unlink(missing_ok=True)
    config.parent.mkdir(parents=True, exist_ok=True)
    run(output, f"init-{name}", [sys.executable, "-m", "paddle_ft", "init", *args, "--output-file", config])


def train(output: Path, name: str, config: Path, overrides: list[str]) -> dict:
    folder = output / "runs" / name
    if (folder / "results.json").is_file():  # finished in an earlier run of the bench
        return json.loads((folder / "results.json").read_text(encoding="utf-8"))
    # float32 unless the caller says (the recorded figures are; train.amp auto would take bf16 on a CPU that has it)
    settings = [f"output_dir={folder}", "train.runtime.write_report=false", "train.amp.enabled=false", *overrides]
    run(output, f"train-{name}", [sys.executable, "-m", "paddle_ft", "train", "-c", config,
                                  *[x for item in settings for x in ("-o", item)]], fresh=folder)
    return json.loads((folder / "results.json").read_text(encoding="utf-8"))


def run(output: Path, name: str, command: list, fresh=None) -> str:
    """Run a child command, its output to OUTPUT/logs/NAME.log; its stdout back. Stops the bench where it fails."""
    import shutil

    if isinstance(fresh, Path):
        shutil.rmtree(fresh, ignore_errors=True)
    elif fresh:
        shutil.rmtree(Path(command[command.index("--output") + 1]).parent, ignore_errors=True)
    with open(output / "logs" / f"{name}.log", "w", encoding="utf-8") as log:
        done = subprocess.run([str(c) for c in command], cwd=ROOT, env=runtime.environment_as_given(), stdout=subprocess.PIPE,
                              stderr=log, text=True)
        log.write(done.stdout)
    if done.returncode:
        raise SystemExit(f"error: {name} failed (exit {done.returncode}); see {output / 'logs' / f'{name}.log'}")
    return done.stdout


# ---------------------------------------------------------------------------------------------- results

def machine() -> dict:
    return {"cpu": runtime.cpu_model(), "cpu_kind": runtime.cpu_kind(), "flags": runtime.cpu_speed_flags(),
            "cores": runtime.usable_cores()}


def _earlier(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write(output: Path, results: dict) -> str:
    (output / RESULTS).write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    text = markdown(results)
    (output / "few_shot_bench.md").write_text(text, encoding="utf-8")
    return text


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({', '.join(m['flags']) or 'no AVX-512'})", ""]
    if "zero_shot" in results:
        scores = results["zero_shot"]["test_accuracy"]
        lines += ["Zero-shot (no training row; one-line label descriptions), test accuracy: "
                  + ", ".join(f"{task} {score:.4f}" for task, score in scores.items()), ""]
    if "few_shot" in results:
        fs = results["few_shot"]
        lines += [f"Few-shot, test accuracy on the demo's {fs['test_rows']} test texts, mean ± stdev of {fs['draws']} "
                  "seeded draws:", "", "| rows per class | TF-IDF + LR | frozen e5 + LR | fine-tuning (init) | "
                  "few-shot recipe (init) |", "|---:|---:|---:|---:|---:|"]
        for size, methods in fs["test_accuracy"].items():
            lines.append(f"| {size} | " + " | ".join(f"{methods[m]['mean']:.4f} ± {methods[m]['stdev']:.4f}" for m in
                                                     ("tfidf_lr", "frozen_lr", "fine_tune", "few_shot")) + " |")
        lines.append("")
    if "add_class" in results:
        a = results["add_class"]
        lines += [f"Add a class without retraining (domain task, {a['new_label']} added from {a['examples']} examples to "
                  f"a model trained on the other five, {a['train_rows_per_label']} rows each): old labels' accuracy "
                  f"{a['old_accuracy_before']:.4f} -> {a['old_accuracy_after']:.4f}, the new label's recall "
                  f"{a['new_label_recall']:.4f}, all six {a['all_accuracy_after']:.4f} (retrained on six: "
                  f"{a['retrained_test_accuracy']:.4f}); the new class's bias {a['bias']:+.2f}, set on "
                  f"{a['reference_rows']} dev rows of the five at --max-changed {a['max_changed']}; add-class "
                  f"{a['add_class_seconds']} s against "
                  f"{a['retrain_minutes']} min to retrain", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
