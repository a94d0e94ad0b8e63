"""`init`: a config from a user's own files, with what it decided and why."""
import csv
import json

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
    assert main(["init", "--train", str(train), "--dev", str(dev), "--output", str(target)]) == 0
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
    tsv.write_text("text\ttopics\n" + "".join(f"文本{i}\t{'财经|股票' if i % 3 else '体育'}\n" for i in range(30)),
                   encoding="utf-8")
    assert main(["init", "--train", str(tsv), "--output", str(tmp_path / "t.yaml")]) == 0
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
    assert main(["init", "--train", str(path), "--output", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and fragment in err and err.count("\n") == 1
    assert not (tmp_path / "x.yaml").exists()


def test_init_never_overwrites_a_config(tmp_path, capsys):
    train = write_reviews(tmp_path / "train.csv", 20)
    (tmp_path / "my.yaml").write_text("mine\n")
    assert main(["init", "--train", str(train), "--output", str(tmp_path / "my.yaml")]) == 2
    assert "already exists" in capsys.readouterr().err and (tmp_path / "my.yaml").read_text() == "mine\n"


def test_init_never_overwrites_a_file_where_it_would_write_the_vocabulary(tmp_path, capsys):
    train = write_reviews(tmp_path / "train.csv", 20)
    (tmp_path / "new-vocab.txt").write_text("mine\n")
    assert main(["init", "--train", str(train), "--output", str(tmp_path / "new.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'new-vocab.txt'} already exists") and err.count("\n") == 1
    assert (tmp_path / "new-vocab.txt").read_text() == "mine\n" and not (tmp_path / "new.yaml").exists()


def test_the_config_init_writes_is_plain_yaml_a_user_can_edit(tmp_path):
    train = write_reviews(tmp_path / "train.csv", 20)
    main(["init", "--train", str(train), "--backbone", "bert-base-chinese", "--output", str(tmp_path / "b.yaml")])
    written = yaml.safe_load((tmp_path / "b.yaml").read_text(encoding="utf-8"))
    assert written["model"] == {"backbone": "bert-base-chinese"}
    assert written["train"]["optimizer"]["learning_rate"] == 3e-5


def test_the_learning_rate_falls_with_the_encoders_size():
    from paddle_ft.commands.recipe import EncoderFacts, learning_rate_for

    def rate(layers, hidden, ffn):
        return learning_rate_for(EncoderFacts(layers, hidden, ffn, 21128, True))

    assert rate(2, 128, 512) == 5e-4  # the demo encoder, where 2e-4 and 1e-3 scored lower (docs/demo.md)
    assert rate(12, 384, 1536) == 7e-5  # multilingual-e5-small
    assert rate(12, 768, 3072) == 3e-5  # BERT-base: its published recipes use 2e-5 to 5e-5
    assert rate(24, 1024, 4096) == 2e-5  # BERT-large


def test_init_fits_the_recipe_to_a_local_encoder_and_offers_trimming(tmp_path, capsys):
    from e5_file import tiny_e5_folder
    from paddle_ft.commands.recipe import EncoderFacts, recipe_notes

    train = write_reviews(tmp_path / "train.csv", 20)
    folder = tiny_e5_folder(tmp_path)
    assert main(["init", "--train", str(train), "--backbone", str(folder), "--output", str(tmp_path / "e5.yaml")]) == 0
    written = yaml.safe_load((tmp_path / "e5.yaml").read_text(encoding="utf-8"))
    assert written["model"] == {"backbone": str(folder), "pooling": "mean"}  # e5 has no pooler
    assert written["train"]["optimizer"]["learning_rate"] == 2e-3  # 2 layers, 32 wide
    assert "learning rate 0.002: " in capsys.readouterr().out
    notes = recipe_notes(EncoderFacts(12, 384, 1536, 250_037, False), "e5", "train.csv", 7e-5)
    assert any(note.startswith("its vocabulary has 250,037 rows") and "trim-vocab --backbone e5 --data train.csv"
               in note for note in notes)
