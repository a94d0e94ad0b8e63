"""`init`: a config from a user's own files, with what it decided and why."""
import csv
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from paddle_ft.cli import main
from paddle_ft.config import load_config
from paddle_ft.data.sniff import propose_max_length, sniff_layout

PHRASES = {"好评": ["质量很好", "物流快", "非常满意"], "差评": ["质量太差", "物流慢", "非常失望"],
           "中评": ["一般般", "还可以", "凑合用"]}


def write_reviews(path, rows: int, seed: int = 0):
    """A CSV as a spreadsheet writes it: a header, texts holding a comma and quotes (so quoted fields)."""
    import random

    rng = random.Random(seed)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review", "rating"])
        for _ in range(rows):
            label = rng.choice(sorted(PHRASES))
            writer.writerow([f"{'，'.join(rng.sample(PHRASES[label], 2))}, 店家说：\"谢谢\"", label])
    return path


def test_init_writes_a_config_that_trains_on_the_files_as_they_are(tmp_path, capsys):
    train, dev = write_reviews(tmp_path / "train.csv", 240), write_reviews(tmp_path / "dev.csv", 60, seed=1)
    target = tmp_path / "my.yaml"
    assert main(["init", "--train", str(train), "--dev", str(dev), "--output-file", str(target)]) == 0
    config = load_config(target)
    assert (config.data.text_column, config.data.label_column, config.data.text_pair_column) == ("review", "rating",
                                                                                                 None)
    assert config.data.labels == ("中评", "好评", "差评") and config.task == "single_label"
    assert config.data.format is None  # each file's extension says
    assert config.data.max_length == 32 and config.model.scratch.max_position_embeddings == 32
    assert (config.train.epochs, config.train.batch_size) == (20, 16)  # 300 steps on 240 rows
    vocab = (tmp_path / "my-vocab.txt").read_text(encoding="utf-8").split()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and {"质", "谢"} <= set(vocab)
    said = "".join(capsys.readouterr())
    assert "label column 'rating': the fewest distinct values" in said
    assert f"train with: python -m paddle_ft train -c {target}" in said
    assert target.read_text(encoding="utf-8").startswith(f"# python -m paddle_ft train -c {target}\n")


def test_init_reads_label_sets_and_text_pairs(tmp_path):
    rows = [{"sentence1": f"问题{i}", "sentence2": f"回答{i}", "labels": ["财经", "股票"][: 1 + i % 2]}
            for i in range(40)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    layout = sniff_layout(path)
    assert (layout.text_column, layout.text_pair_column, layout.label_column) == ("sentence1", "sentence2", "labels")
    assert layout.multi_label and layout.label_delimiter is None
    tsv = tmp_path / "topics.tsv"
    topics = ("体育", "财经|股票", "财经")  # label sets: 财经 also alone
    tsv.write_text("text\ttopics\n" + "".join(f"文本{i}\t{topics[i % 3]}\n" for i in range(30)), encoding="utf-8")
    assert main(["init", "--train", str(tsv), "--output-file", str(tmp_path / "t.yaml")]) == 0
    config = load_config(tmp_path / "t.yaml")
    assert config.task == "multi_label" and config.data.label_delimiter == "|"
    assert config.data.labels == ("体育", "股票", "财经") and config.train.evaluation.metric == "micro_f1"


def test_max_length_keeps_most_texts_whole_in_steps_of_16():
    assert propose_max_length([10] * 95 + [300] * 5, pair=False)[0] == 32
    length, why = propose_max_length(list(range(1, 201)), pair=False)
    assert length == 192 and why.startswith("max_length 192: 95% of the training texts fit whole (the longest has 200")
    assert propose_max_length([1000] * 10, pair=True, limit=128)[0] == 128


@pytest.mark.parametrize("content, fragment", [
    ("review,rating\n\"a comma, never closed,好评\n", ":2: a quote opened on this line is never closed"),
    ("review,rating\n好,好评\n坏,差评,多\n", ":3: 3 fields where the header has 2"),
])
def test_a_bad_file_is_the_readers_one_line_error(tmp_path, capsys, content, fragment):
    path = tmp_path / "train.csv"
    path.write_text(content, encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and fragment in err and err.count("\n") == 1
    assert not (tmp_path / "x.yaml").exists()


def test_init_never_overwrites_a_config(tmp_path, capsys):
    train = write_reviews(tmp_path / "train.csv", 20)
    (tmp_path / "my.yaml").write_text("mine\n")
    assert main(["init", "--train", str(train), "--output-file", str(tmp_path / "my.yaml")]) == 2
    assert "already exists" in capsys.readouterr().err and (tmp_path / "my.yaml").read_text() == "mine\n"


def test_init_never_overwrites_a_file_where_it_would_write_the_vocabulary(tmp_path, capsys):
    train = write_reviews(tmp_path / "train.csv", 20)
    (tmp_path / "new-vocab.txt").write_text("mine\n")
    assert main(["init", "--train", str(train), "--output-file", str(tmp_path / "new.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'new-vocab.txt'} already exists") and err.count("\n") == 1
    assert (tmp_path / "new-vocab.txt").read_text() == "mine\n" and not (tmp_path / "new.yaml").exists()


def test_the_config_init_writes_is_plain_yaml_a_user_can_edit(tmp_path):
    train = write_reviews(tmp_path / "train.csv", 20)
    main(["init", "--train", str(train), "--backbone", "bert-base-chinese", "--recipe", "fine_tune", "--output-file",
          str(tmp_path / "b.yaml")])
    written = yaml.safe_load((tmp_path / "b.yaml").read_text(encoding="utf-8"))
    assert written["model"] == {"backbone": "bert-base-chinese"}
    assert written["train"]["optimizer"]["learning_rate"] == 3e-5


def test_the_learning_rate_falls_with_the_encoders_size():
    from paddle_ft.workflows.recipe import EncoderFacts, learning_rate_for

    def rate(layers, hidden, ffn):
        return learning_rate_for(EncoderFacts(layers, hidden, ffn, 21128, True))

    assert rate(2, 128, 512) == 5e-4  # the demo encoder, where 2e-4 and 1e-3 scored lower (docs/demo.md)
    assert rate(12, 384, 1536) == 7e-5  # multilingual-e5-small
    assert rate(12, 768, 3072) == 3e-5  # BERT-base: its published recipes use 2e-5 to 5e-5
    assert rate(24, 1024, 4096) == 2e-5  # BERT-large


def test_init_fits_the_recipe_to_a_local_encoder_and_offers_trimming(tmp_path, capsys):
    from e5_file import tiny_e5_folder

    from paddle_ft.workflows.recipe import EncoderFacts, recipe_notes

    train = write_reviews(tmp_path / "train.csv", 20)
    folder = tiny_e5_folder(tmp_path)
    assert main(["init", "--train", str(train), "--backbone", str(folder), "--recipe", "fine_tune", "--output-file",
                 str(tmp_path / "e5.yaml")]) == 0
    written = yaml.safe_load((tmp_path / "e5.yaml").read_text(encoding="utf-8"))
    assert written["model"] == {"backbone": str(folder), "pooling": "mean"}  # e5 has no pooler
    assert written["train"]["optimizer"]["learning_rate"] == 2e-3  # 2 layers, 32 wide
    assert "learning rate 0.002: " in capsys.readouterr().out
    notes = recipe_notes(EncoderFacts(12, 384, 1536, 250_037, False), "e5", ["train.csv", "dev.csv", "test.csv"],
                         7e-5)
    assert any(note.startswith("its embedding table has 250,037 rows") and "trim-vocab --backbone e5 --data train.csv "
               "dev.csv test.csv --output" in note for note in notes)  # every labelled file, not the training one


def test_a_few_rows_per_class_get_the_few_shot_recipe_and_descriptions_alone_a_zero_shot_config(tmp_path, capsys):
    from e5_file import tiny_e5_folder

    folder = tiny_e5_folder(tmp_path)
    (folder / "README.md").write_text('A sentence encoder; its texts start with "query: " or "passage: ".\n')
    train = write_reviews(tmp_path / "train.csv", 20)  # about 10 rows per class
    assert main(["init", "--train", str(train), "--backbone", str(folder), "--output-file", str(tmp_path / "few.yaml")]) == 0
    written = yaml.safe_load((tmp_path / "few.yaml").read_text(encoding="utf-8"))
    assert written["model"] == {"backbone": str(folder), "pooling": "mean", "head": "prototype",
                                "text_prefix": "query: "}
    assert written["train"]["recipe"] == "few_shot"
    assert re.search(r"few-shot recipe \(the smallest class has \d+ rows \(<= 32\)\)", capsys.readouterr().out)
    (tmp_path / "labels.tsv").write_text("差评\t不满意\n好评\t满意\n中评\t一般\n", encoding="utf-8")
    assert main(["init", "--labels", str(tmp_path / "labels.tsv"), "--backbone", str(folder), "--test", str(train),
                 "--output-file", str(tmp_path / "zero.yaml")]) == 0
    zero = yaml.safe_load((tmp_path / "zero.yaml").read_text(encoding="utf-8"))
    assert zero["data"]["train"] is None and zero["data"]["labels"] == ["差评", "好评", "中评"]
    assert zero["data"]["label_descriptions"] == str(tmp_path / "labels.tsv") and zero["model"]["head"] == "prototype"
    capsys.readouterr()
    (tmp_path / "two.tsv").write_text("差评\t不满意\n", encoding="utf-8")
    assert main(["init", "--labels", str(tmp_path / "two.tsv"), "--backbone", str(folder), "--test", str(train),
                 "--output-file", str(tmp_path / "z2.yaml")]) == 2
    assert "describes 1 label(s); a classifier needs two or more" in capsys.readouterr().err
    assert main(["init", "--labels", str(tmp_path / "labels.tsv"), "--output-file", str(tmp_path / "z3.yaml")]) == 2
    assert "--labels needs a pretrained --backbone" in capsys.readouterr().err


# issue 43, root 1: init checks what it decided against the data and against what train accepts, and every decision
# can be overruled


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_file_without_a_header_is_refused_then_read_whole_with_no_header(tmp_path, capsys):
    from paddle_ft.workflows.build import read_dataset

    path = tmp_path / "train.csv"
    rows = [(f"{PHRASES[label][i % 3]}，第{i}条评论写得比较长一些", label) for i in range(60)
            for label in ("好评", "差评")]
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    target = tmp_path / "my.yaml"
    assert main(["init", "--train", str(path), "--output-file", str(target)]) == 2
    line = one_line(capsys)
    assert f"{path}:1: the first row looks like data" in line and "--no-header" in line and not target.exists()
    assert main(["init", "--train", str(path), "--output-file", str(target), "--no-header"]) == 0
    config = load_config(target)
    assert (config.data.header, config.data.text_column, config.data.label_column) == (False, "1", "2")
    examples = read_dataset(config.data).examples["train"]
    assert [(e.text, e.label) for e in examples] == rows  # the first review is a row, not a column name


def test_a_spreadsheets_sep_line_is_skipped_and_another_delimiter_named(tmp_path, capsys):
    path = tmp_path / "train.csv"
    path.write_text("sep=,\nreview,rating\n" + "".join(f"评论{i},{'好评' if i % 2 else '差评'}\n" for i in range(20)),
                    encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "a.yaml")]) == 0
    assert load_config(tmp_path / "a.yaml").data.text_column == "review"
    path.write_text("sep=;\nreview;rating\n评论;好评\n", encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "b.yaml")]) == 2
    assert f"{path}:1: the first line declares ';' as the delimiter" in one_line(capsys)


def test_label_names_holding_a_delimiter_stay_single_labels_unless_overruled(tmp_path, capsys):
    path = tmp_path / "news.tsv"
    names = ("房产、家居", "体育", "财经")
    path.write_text("text\tlabel\n" + "".join(f"新闻{i}\t{names[i % 3]}\n" for i in range(60)), encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "a.yaml")]) == 0
    config = load_config(tmp_path / "a.yaml")
    assert config.task == "single_label" and config.data.labels == ("体育", "房产、家居", "财经")
    assert "--task multi_label --label-delimiter '、'" in "".join(capsys.readouterr())
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "b.yaml"), "--label-delimiter", "、"]) == 0
    config = load_config(tmp_path / "b.yaml")
    assert config.task == "multi_label" and config.data.label_delimiter == "、"
    assert config.data.labels == ("体育", "家居", "房产", "财经")


def test_columns_are_overruled_by_name_and_an_unknown_one_is_one_line(tmp_path, capsys):
    path = tmp_path / "t.tsv"
    path.write_text("id\tbody\tstars\n" + "".join(f"{i}\t评论内容{i}\t{i % 2}\n" for i in range(40)), encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "a.yaml"), "--text-column", "body",
                 "--label-column", "stars"]) == 0
    config = load_config(tmp_path / "a.yaml")
    assert (config.data.text_column, config.data.label_column, config.data.labels) == ("body", "stars", ("0", "1"))
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "b.yaml"), "--text-column", "review"]) == 2
    assert "--text-column review: no such column (columns: id, body, stars)" in one_line(capsys)


@pytest.mark.parametrize("case, fragment", [
    ("one class", "every row has the label '好评'"),
    ("dev label unseen", "dev.tsv:3: the label '中评' never occurs in"),
    ("missing backbone path", "--backbone ./models/nothing: there is no model folder there"),
    ("unknown backbone name", "--backbone bert-base-chinse: there is no model folder there, and it is not a "
                              "PaddleNLP model name"),
    ("output folder missing", "its folder"),
])
def test_what_train_would_refuse_is_one_line_and_writes_nothing(case, fragment, tmp_path, capsys):
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    labels = ("好评",) if case == "one class" else ("好评", "差评")
    train.write_text("text\tlabel\n" + "".join(f"评论{i}\t{labels[i % len(labels)]}\n" for i in range(20)),
                     encoding="utf-8")
    dev.write_text("text\tlabel\n评论a\t好评\n评论b\t中评\n", encoding="utf-8")
    target = tmp_path / ("missing" if case == "output folder missing" else ".") / "my.yaml"
    backbone = {"missing backbone path": ["--backbone", "./models/nothing"],
                "unknown backbone name": ["--backbone", "bert-base-chinse"]}.get(case, [])
    assert main(["init", "--train", str(train), "--dev", str(dev), "--output-file", str(target), *backbone]) == 2
    assert fragment in one_line(capsys)
    assert not target.exists() and not (tmp_path / "my-vocab.txt").exists()


def test_a_bad_row_names_the_fix_init_accepts_and_init_writes_it(tmp_path, capsys):
    path = tmp_path / "train.tsv"
    path.write_text("text\tlabel\n" + "".join(f"评论{i}\t{'好评' if i % 2 else '差评'}\n" for i in range(60))
                    + "多出一列\t好评\t多\n", encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "a.yaml")]) == 2
    assert "use -o data.on_bad_row=skip to drop bad rows" in one_line(capsys)
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "a.yaml"), "-o", "data.on_bad_row=skip",
                 "-o", "train.epochs=2"]) == 0
    config = load_config(tmp_path / "a.yaml")
    assert (config.data.on_bad_row, config.train.epochs) == ("skip", 2)


def test_labels_written_as_paths_are_read_as_a_tree_unless_overruled(tmp_path, capsys):
    path = tmp_path / "goods.tsv"
    names = ("电子/手机", "电子/电脑", "图书/小说", "图书/教材")
    path.write_text("text\tlabel\n" + "".join(f"商品{i}\t{names[i % 4]}\n" for i in range(80)), encoding="utf-8")
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "a.yaml")]) == 0
    config = load_config(tmp_path / "a.yaml")
    assert config.task == "single_label" and config.data.label_hierarchy == "/"
    assert "the labels are paths of a tree (图书/小说: 2 levels, 2 at the top)" in "".join(capsys.readouterr())
    assert main(["init", "--train", str(path), "--output-file", str(tmp_path / "b.yaml"), "-o",
                 "data.label_hierarchy=null"]) == 0
    assert load_config(tmp_path / "b.yaml").data.label_hierarchy is None
    parent_too = tmp_path / "parent.tsv"
    parent_too.write_text(path.read_text(encoding="utf-8") + "商品\t电子\n", encoding="utf-8")
    assert main(["init", "--train", str(parent_too), "--output-file", str(tmp_path / "c.yaml")]) == 0
    assert load_config(tmp_path / "c.yaml").data.label_hierarchy is None
    assert "label '电子' is both a label and the parent of '电子/手机'" in "".join(capsys.readouterr())


def test_init_times_the_recipe_here_and_says_the_minutes_and_the_memory(tmp_path, capsys):
    from e5_file import tiny_e5_folder

    train = write_reviews(tmp_path / "train.csv", 40)
    folder = tiny_e5_folder(tmp_path)
    assert main(["init", "--train", str(train), "--backbone", str(folder), "--recipe", "fine_tune", "--output-file",
                 str(tmp_path / "timed.yaml")]) == 0
    said = capsys.readouterr().out
    line = next(line for line in said.splitlines() if line.startswith("on this machine ("))
    assert "an epoch of 40 rows" in line and "for the recipe's" in line and "peak memory about" in line
    assert float(line.split("peak memory about ")[1].split(" GB")[0]) > 0.1  # a process with paddle loaded
    assert said.index("timing a few training steps") < said.index("wrote ")  # the timing's own logs kept back
    assert "step 8/8" not in said and not list(tmp_path.glob("out*"))  # nothing of the timed run is left


def test_a_budget_refused_when_not_even_a_few_steps_fit_it(tmp_path, capsys):
    from e5_file import tiny_e5_folder

    train = write_reviews(tmp_path / "train.csv", 40)
    target = tmp_path / "tight.yaml"
    assert main(["init", "--train", str(train), "--backbone", str(tiny_e5_folder(tmp_path)), "--recipe", "fine_tune",
                 "--budget", "0.0001", "--output-file", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --budget 0.0001: 50 training steps take about ") and err.count("\n") == 1
    assert not target.exists()  # no recipe left behind that would not fit
    for ignored in (["--no-forecast"], []):  # timing is what a budget is fitted to: never silently ignored
        backbone = ["--backbone", str(tiny_e5_folder(tmp_path))] if ignored else []
        assert main(["init", "--train", str(train), *backbone, *ignored, "--budget", "5", "--output-file",
                     str(target)]) == 2
        assert capsys.readouterr().err == ("error: --budget fits the recipe to minutes timed here, which takes --train "
                                           "and a --backbone folder (and no --no-forecast)\n")


def fake_forecast(**changed):
    from paddle_ft.workflows.forecast import Forecast

    values = {"train_rows": 13_889, "epochs": 3, "steps_per_epoch": 435, "epoch_seconds": 600.0,
              "evaluation_seconds": 20.0, "evaluations_per_epoch": 1.0, "final_seconds": 20.0,
              "peak_bytes": 3 * 2**30, "machine": "a test CPU"}
    return Forecast(**{**values, **changed})


def test_a_budget_keeps_the_epochs_that_fit_or_a_part_of_one():
    plan = fake_forecast()
    assert plan.total_seconds() == 3 * 620 + 20
    assert plan.fitted(3 * 620 + 20) is None
    assert plan.fitted(2 * 620 + 20) == {"train.epochs": 2}
    assert plan.fitted(2 * 620 + 19) == {"train.epochs": 1}
    # half an epoch: the steps that fit after the final scoring and one evaluation
    assert plan.fitted(300 + 40) == {"train.max_steps": int(300 / (600 / 435))}
    with pytest.raises(ValueError, match="50 training steps take about"):
        plan.fitted(60)


def test_init_writes_the_recipe_the_budget_allows(tmp_path, capsys, monkeypatch):
    from e5_file import tiny_e5_folder

    import paddle_ft.workflows.forecast as forecasting

    monkeypatch.setattr(forecasting, "forecast", lambda path: fake_forecast(epochs=10, steps_per_epoch=4,
                                                                            train_rows=40))
    train = write_reviews(tmp_path / "train.csv", 40)
    target = tmp_path / "budget.yaml"
    assert main(["init", "--train", str(train), "--backbone", str(tiny_e5_folder(tmp_path)), "--recipe", "fine_tune",
                 "--budget", "30", "--output-file", str(target)]) == 0
    written = target.read_text(encoding="utf-8")
    assert yaml.safe_load(written)["train"]["epochs"] == 2  # (1800 s - 20) // 620
    assert "# --budget 30: train.epochs: 2, about 21 min 00 s here instead of 1 h 43 min" in written
    assert "--budget 30: train.epochs: 2" in capsys.readouterr().out


def test_init_trims_a_large_sentencepiece_vocabulary_to_enough_texts_and_not_to_a_few(tmp_path, capsys, monkeypatch):
    from e5_file import tiny_e5_folder

    from paddle_ft.models.trim import trimmed_from
    from paddle_ft.workflows import init

    folder = tiny_e5_folder(tmp_path)
    monkeypatch.setattr(init, "TRIM_ABOVE", 10)  # the tiny folder's ~150 pieces stand for e5's 250,002
    monkeypatch.setattr(init, "MIN_TRIM_TEXTS", 10)
    few = write_reviews(tmp_path / "few.csv", 9)
    assert main(["init", "--train", str(few), "--backbone", str(folder), "--recipe", "fine_tune", "--no-forecast",
                 "--output-file", str(tmp_path / "few.yaml")]) == 0
    assert yaml.safe_load((tmp_path / "few.yaml").read_text(encoding="utf-8"))["model"]["backbone"] == str(folder)
    assert re.search(r"the vocabulary is not trimmed: \d distinct texts are too few to trim on \(a piece they do not "
                     r"use would read as <unk> in every new text\); with 10 or more, python -m paddle_ft trim-vocab",
                     capsys.readouterr().out)
    enough = write_reviews(tmp_path / "reviews.csv", 60)
    for name in ("a.yaml", "b.yaml"):  # the second init reuses the folder the first trimmed
        assert main(["init", "--train", str(enough), "--backbone", str(folder), "--recipe", "fine_tune",
                     "--no-forecast", "--output-file", str(tmp_path / name)]) == 0
        said = capsys.readouterr().out
        assert ("trimming " in said) == (name == "a.yaml")
    trimmed = Path(yaml.safe_load((tmp_path / "b.yaml").read_text(encoding="utf-8"))["model"]["backbone"])
    assert trimmed.parent == folder.parent and trimmed.name.startswith(f"{folder.name}-trimmed-reviews-")
    assert trimmed_from(str(trimmed)).texts == 60 and f"model.backbone {trimmed}: " in said
    # a folder of that name that init did not trim is never replaced
    shutil.rmtree(trimmed)
    trimmed.mkdir()
    (trimmed / "mine.txt").write_text("a user's file\n", encoding="utf-8")
    assert main(["init", "--train", str(enough), "--backbone", str(folder), "--recipe", "fine_tune", "--no-forecast",
                 "--output-file", str(tmp_path / "c.yaml")]) == 2
    assert capsys.readouterr().err == (f"error: {trimmed} exists and is not a trim init made of these texts (no "
                                       "readable paddle_ft_trim.json); move it away, or give --no-trim\n")
    assert (trimmed / "mine.txt").read_text(encoding="utf-8") == "a user's file\n" and not (tmp_path / "c.yaml").exists()
    assert main(["init", "--train", str(enough), "--backbone", str(folder), "--no-trim", "--no-forecast",
                 "--recipe", "fine_tune", "--output-file", str(tmp_path / "whole.yaml")]) == 0
    assert yaml.safe_load((tmp_path / "whole.yaml").read_text(encoding="utf-8"))["model"]["backbone"] == str(folder)


def test_the_readmes_zero_shot_line_with_no_data_file_trains_a_model_that_predicts(tmp_path, capsys):
    """Issue 64, root 8: `init --labels L --backbone DIR --output-file my.yaml` (README's line, no data file) wrote a
    config whose train ended in a StopIteration traceback (no split had rows to take the drift reference from)."""
    from e5_file import tiny_e5_folder

    folder = tiny_e5_folder(tmp_path)
    labels = tmp_path / "labels.tsv"
    labels.write_text("差评\t顾客不满意的评价\n好评\t顾客满意的评价\n", encoding="utf-8")
    config = tmp_path / "zero.yaml"
    assert main(["init", "--labels", str(labels), "--backbone", str(folder), "--output-file", str(config),
                 "-o", f"output_dir={tmp_path / 'zero'}"]) == 0
    assert main(["train", "--config", str(config)]) == 0
    best = tmp_path / "zero" / "best"
    manifest = json.loads((best / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["metrics"] == {} and manifest["reference"] is None  # no row scored, none to compare drift with
    assert main(["export", "--model", str(best), "--output", str(tmp_path / "export")]) == 0
    capsys.readouterr()
    assert main(["predict", "--export", str(tmp_path / "export"), "--text", "非常满意"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("差评", "好评")


def test_a_refused_init_leaves_nothing_behind_and_names_no_file_that_is_gone(tmp_path, capsys):
    """Issue 64, root 8: a refused init named its vanished draft file and left my-vocab.txt, which blocked the rerun."""
    train = write_reviews(tmp_path / "train.csv", 40)
    target = tmp_path / "my.yaml"
    assert main(["init", "--train", str(train), "--output-file", str(target), "-o", "train.epochs=0"]) == 2
    error = one_line(capsys)
    assert f"{target}" in error and ".tmp-" not in error and "init wrote nothing" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.csv"]
    assert main(["init", "--train", str(train), "--output-file", str(target)]) == 0  # the rerun is not blocked


def test_init_refuses_a_description_the_model_reads_as_nothing_and_few_shot_needs_pairs_in_a_batch(tmp_path, capsys):
    from e5_file import tiny_e5_folder

    from paddle_ft.tokenization import NO_TOKEN

    folder = tiny_e5_folder(tmp_path)
    labels = tmp_path / "labels.tsv"
    labels.write_text("差评\t\u200b\u200b\n好评\t满意\n", encoding="utf-8")
    assert main(["init", "--labels", str(labels), "--backbone", str(folder), "--output-file",
                 str(tmp_path / "z.yaml")]) == 2
    assert one_line(capsys) == f"error: {labels}:1: the description {NO_TOKEN}"
    train = write_reviews(tmp_path / "train.csv", 20)
    assert main(["init", "--train", str(train), "--backbone", str(folder), "--output-file", str(tmp_path / "f.yaml"),
                 "-o", "train.batch_size=1"]) == 2  # a batch of one row holds no pair: the run would learn nothing
    error = one_line(capsys)
    assert "config key 'train.batch_size'" in error and "is 1, but the few_shot recipe learns from the pairs of rows " \
        "within a batch: set 2 or more" in error
