"""Issue 45: the labelling loop's commands on a trained tiny model. Tasks exported, labelled as the tool would and
imported give back exactly the rows and labels; a label-issues review comes back as corrections training reads;
select repeats exactly and leaves out what is labelled."""
import json

import pytest
from conftest import train_tiny

from paddle_ft.cli import main
from paddle_ft.data.readers import Columns, read_examples


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("labelling")
    train_tiny(root)
    return root


def gold_rows(trained):
    return [(e.text, e.label) for e in read_examples(trained / "data" / "test.tsv", "tsv", Columns())[0]]


def labelled_in_label_studio(tasks: list, labels: list) -> list:
    """What Label Studio's JSON export holds after a person chose `labels` (the tasks' data and predictions kept)."""
    return [{**task, "id": i + 1, "annotations": [{"id": 100 + i, "result": [
        {"value": {"choices": [label]}, "id": f"r{i}", "from_name": "label", "to_name": "text", "type": "choices",
         "origin": "prediction-changed"}], "was_cancelled": False, "ground_truth": False,
        "created_at": "2026-12-05T10:00:00Z", "updated_at": "2026-12-05T10:00:00Z", "lead_time": 3.2, "task": i + 1,
        "completed_by": 1}]} for i, (task, label) in enumerate(zip(tasks, labels))]


def test_label_studio_round_trip_gives_back_exactly_the_rows_and_labels(trained, tmp_path, capsys):
    tasks_file = tmp_path / "tasks.json"
    assert main(["export-tasks", "--model", str(trained / "out" / "best"), "--input", str(trained / "data" /
                                                                                         "test.tsv"),
                 "--to", "label-studio", "--output-file", str(tasks_file)]) == 0
    assert "wrote 40 tasks for label-studio" in capsys.readouterr().out
    tasks = json.loads(tasks_file.read_text(encoding="utf-8"))
    rows = gold_rows(trained)
    assert [t["data"]["text"] for t in tasks] == [text for text, _ in rows]
    assert [t["data"]["line"] for t in tasks] == list(range(2, 42))
    prediction = tasks[0]["predictions"][0]
    assert prediction["result"][0]["value"]["choices"][0] in ("负面", "正面") and 0.5 <= prediction["score"] <= 1
    assert '<Choice value="负面"/>' in (tmp_path / "tasks.label_config.xml").read_text(encoding="utf-8")

    export = tmp_path / "export.json"
    export.write_text(json.dumps(labelled_in_label_studio(tasks, [label for _, label in rows]), ensure_ascii=False),
                      encoding="utf-8")
    assert main(["import-annotations", str(export), "--from", "label-studio", "--output-file", str(tmp_path / "labelled.tsv")]) == 0
    assert "imported 40 labelled texts" in capsys.readouterr().out
    back = read_examples(tmp_path / "labelled.tsv", "tsv", Columns())[0]
    assert [(e.text, e.label) for e in back] == rows


def test_doccano_round_trip_gives_back_exactly_the_rows_and_labels(trained, tmp_path):
    tasks_file = tmp_path / "tasks.jsonl"
    assert main(["export-tasks", "--model", str(trained / "out" / "best"), "--input",
                 str(trained / "data" / "test.tsv"), "--to", "doccano", "--output-file", str(tasks_file)]) == 0
    rows = gold_rows(trained)
    # doccano's export: its id, the label a person left or chose, the comments, the metadata it was given
    exported = [{**json.loads(line), "id": i + 1, "label": [rows[i][1]], "Comments": []}
                for i, line in enumerate(tasks_file.read_text(encoding="utf-8").splitlines())]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in exported), encoding="utf-8")
    assert main(["import-annotations", str(export), "--from", "doccano", "--output-file", str(tmp_path / "labelled.jsonl")]) == 0
    back = read_examples(tmp_path / "labelled.jsonl", "jsonl", Columns())[0]
    assert [(e.text, e.label) for e in back] == rows


def test_import_appends_to_the_training_file_in_its_own_columns_once(trained, tmp_path, capsys):
    """Issue 63: README said -o data.train=labelled.csv, which trained on the new rows without the old ones; --append
    adds them to the training file, as train reads it, and a second import of the same answers adds nothing."""
    import shutil

    tasks_file = tmp_path / "tasks.jsonl"
    assert main(["export-tasks", "--model", str(trained / "out" / "best"), "--input",
                 str(trained / "data" / "test.tsv"), "--to", "doccano", "--output-file", str(tasks_file)]) == 0
    rows = gold_rows(trained)
    exported = [{**json.loads(line), "id": i + 1, "label": [rows[i][1]]}
                for i, line in enumerate(tasks_file.read_text(encoding="utf-8").splitlines())]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in exported), encoding="utf-8")
    train = shutil.copy(trained / "data" / "train.tsv", tmp_path / "train.tsv")
    old = [(e.text, e.label) for e in read_examples(train, "tsv", Columns())[0]]
    capsys.readouterr()
    assert main(["import-annotations", str(export), "--from", "doccano", "--append", str(train)]) == 0
    assert f"{len(rows)} rows added to its {len(old)}" in capsys.readouterr().out
    assert [(e.text, e.label) for e in read_examples(train, "tsv", Columns())[0]] == old + rows
    assert main(["import-annotations", str(export), "--from", "doccano", "--append", str(train)]) == 0
    assert f"0 rows added to its {len(old) + len(rows)}; {len(rows)} it holds already" in capsys.readouterr().out
    # a JSON Lines training file keeps its rows byte for byte, each with its own keys (the second has an id)
    held = '{"text": "好", "label": "正面"}\r\n{"label": "负面", "text": "差", "id": 7}'
    (tmp_path / "train.jsonl").write_text(held, encoding="utf-8", newline="")
    assert main(["import-annotations", str(export), "--from", "doccano", "--append", str(tmp_path / "train.jsonl")]) == 0
    written = (tmp_path / "train.jsonl").read_bytes().decode("utf-8")
    assert written.startswith(held + "\n")
    assert [(e.text, e.label) for e in read_examples(tmp_path / "train.jsonl", "jsonl", Columns())[0]] == \
        [("好", "正面"), ("差", "负面"), *rows]
    assert main(["import-annotations", str(export), "--from", "doccano", "--append", str(tmp_path / "no.tsv")]) == 2
    assert capsys.readouterr().err == (f"error: --append {tmp_path / 'no.tsv'}: no such file; give the training file "
                                       "to add the rows to, or --output-file FILE to write a new one\n")


def test_a_review_answered_in_label_studio_comes_back_as_corrections_training_reads(trained, tmp_path, capsys):
    from paddle_ft.data.corrections import read_corrections

    rows = gold_rows(trained)
    review = tmp_path / "review.tsv"
    review.write_text("file\tline\ttext\tlabel\tsuggested\tconfidence\tdecision\n" + "".join(
        f"data/train.tsv\t{line}\t{text}\t{label}\t{'正面' if label == '负面' else '负面'}\t0.9\t\n"
        for line, (text, label) in zip((5, 9, 12), rows[:3])), encoding="utf-8")
    assert main(["export-tasks", "--model", str(trained / "out" / "best"), "--input", str(review), "--to",
                 "label-studio", "--output-file", str(tmp_path / "review.json")]) == 0
    tasks = json.loads((tmp_path / "review.json").read_text(encoding="utf-8"))
    assert {k: tasks[1]["data"][k] for k in ("file", "line", "given")} == {"file": "data/train.tsv", "line": 9,
                                                                           "given": rows[1][1]}
    chosen = ["正面", rows[1][1], "负面"]
    (tmp_path / "export.json").write_text(json.dumps(labelled_in_label_studio(tasks, chosen), ensure_ascii=False),
                                          encoding="utf-8")
    assert main(["import-annotations", str(tmp_path / "export.json"), "--from", "label-studio", "--output-file",
                 str(tmp_path / "corrections.tsv")]) == 0
    assert "a corrections file for data.corrections" in capsys.readouterr().out
    corrections = read_corrections(tmp_path / "corrections.tsv", Columns(), frozenset({"负面", "正面"}))
    assert [(c.line, c.text, c.label) for c in corrections] == [
        (line, rows[i][0], label) for i, (line, label) in enumerate(zip((5, 9, 12), chosen))]


def test_select_repeats_exactly_ranks_by_its_strategy_and_leaves_out_what_is_labelled(trained, tmp_path, capsys):
    pool = tmp_path / "pool.tsv"
    pool.write_text((trained / "data" / "test.tsv").read_text(encoding="utf-8") + "".join(
        f"{text}\t{label}\n" for text, label in read_rows(trained / "data" / "train.tsv")[:5]), encoding="utf-8")
    outputs = {}
    for strategy in ("uncertainty", "margin", "diverse", "random"):
        for attempt in (1, 2):
            out = tmp_path / f"{strategy}-{attempt}.jsonl"
            assert main(["select-texts", "--model", str(trained / "out" / "best"), "--pool", str(pool), "--count", "8",
                         "--strategy", strategy, "--to", "doccano", "--output-file", str(out)]) == 0
            assert "5 texts of" in capsys.readouterr().out  # the training rows in the pool are labelled already
            outputs[strategy, attempt] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert outputs[strategy, 1] == outputs[strategy, 2] and len(outputs[strategy, 1]) == 8
        assert all(row["line"] <= 41 for row in outputs[strategy, 1])
    uncertain = [row["uncertainty"] for row in outputs["uncertainty", 1]]
    assert uncertain == sorted(uncertain, reverse=True) and [r["rank"] for r in outputs["uncertainty", 1]] == list(
        range(1, 9))
    # uncertainty's first pick is the least sure text of the pool: no text random took is less sure
    assert max(r["uncertainty"] for r in outputs["random", 1]) <= uncertain[0] + 1e-9


def test_select_takes_labelled_texts_from_a_txt_file_of_one_text_per_line(trained, tmp_path, capsys):
    """Issue 64, root 9: `--labelled texts.txt` was read as a TSV (its first line a header, every other line a bad
    row): the labelled texts count by their text alone, from any file of texts."""
    pool = trained / "data" / "test.tsv"
    labelled = tmp_path / "texts.txt"
    labelled.write_text("".join(f"{text}\n" for text, _ in read_rows(pool)[:7]), encoding="utf-8")
    out = tmp_path / "next.jsonl"
    assert main(["select-texts", "--model", str(trained / "out" / "best"), "--pool", str(pool), "--count", "8",
                 "--labelled", str(labelled), "--to", "doccano", "--output-file", str(out)]) == 0
    assert "7 texts of" in capsys.readouterr().out
    chosen = {json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()}
    assert not chosen & {text for text, _ in read_rows(pool)[:7]}


def read_rows(path):
    return [(e.text, e.label) for e in read_examples(path, "tsv", Columns())[0]]


@pytest.mark.parametrize("args, message", [
    (["export-tasks", "--model", "{export}", "--input", "{test}", "--to", "doccano", "--output-file", "{out}"],
     "is an export; give the training run's best/ folder"),
    (["import-annotations", "{test}", "--from", "doccano", "--output-file", "{out}"], "not valid JSON"),
    (["import-annotations", "{tasks}", "--from", "label-studio", "--output-file", "{tmp}/x.json"], "cannot tell the format"),
])
def test_bad_input_is_one_line(trained, tmp_path, capsys, args, message):
    from conftest import export_tiny_model

    export = export_tiny_model(tmp_path / "tiny") if "{export}" in args else None
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(labelled_in_label_studio([{"data": {"text": "好"}}], ["正面"])), encoding="utf-8")
    values = {"{export}": str(export), "{test}": str(trained / "data" / "test.tsv"), "{out}": str(tmp_path / "o.jsonl"),
              "{tasks}": str(tasks), "{tmp}": str(tmp_path)}
    args = [values.get(a, a.replace("{tmp}", str(tmp_path))) for a in args]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
