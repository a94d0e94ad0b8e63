"""Issue 64, root 2: `import-annotations` never writes what train would misread. Each imported file is read back
with train's reader before the command says it succeeded; what a file cannot carry is refused naming the way out."""
import json

import pytest

from paddle_ft.cli import main
from paddle_ft.data.annotation_exports import read_annotations
from paddle_ft.data.readers import Columns, read_examples


def task(task_id, text, *annotations):
    return {"id": task_id, "data": {"text": text}, "annotations": list(annotations)}


def choice(*choices, updated="2026-12-05T10:00:00Z", kind="choices"):
    return {"result": [{"value": {kind: list(choices)}, "from_name": "label", "to_name": "text", "type": kind}],
            "was_cancelled": False, "updated_at": updated}


def export(tmp_path, tasks):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    return path


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("flags, fragment", [
    (["--text-column", "x", "--label-column", "x"], "--text-column and --label-column are both 'x'"),
    (["--label-column", "a\tb"], "--label-column 'a\\tb': give a column name without tabs"),
    (["--text-column", ""], "--text-column '': give a column name"),
])
def test_column_names_train_could_not_read_back_are_refused(flags, fragment, tmp_path, capsys):
    path = export(tmp_path, [task(1, "好", choice("正面")), task(2, "差", choice("负面"))])
    out = tmp_path / "rows.tsv"
    assert main(["import-annotations", str(path), "--from", "label-studio", "--output-file", str(out), *flags]) == 2
    assert fragment in one_error(capsys) and not out.exists()


@pytest.mark.parametrize("label, fragment", [
    ("好\t评", "the label '好\\t评' has a tab or line break, which a .tsv cannot hold"),
    (" 好评", "the label ' 好评' has blanks around it, which train strips"),
])
def test_a_label_a_tsv_would_change_is_refused_and_a_jsonl_keeps_it(label, fragment, tmp_path, capsys):
    path = export(tmp_path, [task(1, "好", choice(label)), task(2, "差", choice("差评"))])
    assert main(["import-annotations", str(path), "--from", "label-studio", "--output-file",
                 str(tmp_path / "rows.tsv")]) == 2
    assert fragment in one_error(capsys) and not (tmp_path / "rows.tsv").exists()


def test_a_taxonomy_node_holding_the_separator_is_refused_not_split_into_two_levels(tmp_path):
    path = export(tmp_path, [task(1, "路由器", choice(["网络", "TCP/IP"], kind="taxonomy"))])
    with pytest.raises(Exception, match=r"the taxonomy node 'TCP/IP' holds '/', which separates the levels"):
        read_annotations(path, "label-studio")


def test_a_choice_given_twice_is_one_label_and_the_file_is_single_label(tmp_path, capsys):
    path = export(tmp_path, [task(1, "好", choice("正面", "正面")), task(2, "差", choice("负面"))])
    out = tmp_path / "rows.tsv"
    assert main(["import-annotations", str(path), "--from", "label-studio", "--output-file", str(out)]) == 0
    assert "multi-label" not in capsys.readouterr().out
    rows, _ = read_examples(out, "tsv", Columns())
    assert [(r.text, r.label) for r in rows] == [("好", "正面"), ("差", "负面")]


@pytest.mark.parametrize("earlier, later", [
    ("2026-12-05T10:00:00.900000Z", "2026-12-05T10:00:01Z"),  # as strings, ".9..." sorts after ":01Z"'s ":0"
    ("2026-12-05T10:00:00Z", "2026-12-05T11:30:00+01:00"),  # 10:30 UTC
    ("2026-12-05T18:00:00+08:00", "2026-12-05T10:30:00"),  # 10:00 UTC against 10:30 (no zone: UTC)
])
def test_disagreeing_annotators_are_ordered_by_time_not_by_string(earlier, later, tmp_path):
    path = export(tmp_path, [task(1, "一般", choice("正面", updated=later), choice("负面", updated=earlier))])
    rows, report = read_annotations(path, "label-studio")
    assert rows[0].labels == ("正面",) and report.disagreeing == [1]


def test_an_import_is_read_back_as_train_reads_it_before_it_is_in_place(tmp_path, capsys, monkeypatch):
    """Whatever the checks above miss, the file is read back by train's own reader, and a row that comes back
    otherwise than annotated leaves nothing behind."""
    from paddle_ft.data import readers

    path = export(tmp_path, [task(1, "好", choice("正面")), task(2, "差", choice("负面"))])
    real = readers.write_records
    monkeypatch.setattr("paddle_ft.workflows.annotation.write_records",  # a writer that loses the second label
                        lambda target, fmt, names, records: real(target, fmt, names, [records[0], {**records[1],
                                                                                               "label": "正面"}]))
    out = tmp_path / "rows.tsv"
    assert main(["import-annotations", str(path), "--from", "label-studio", "--output-file", str(out)]) == 2
    assert "as train would read it, row 2 is not the one annotated" in one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json"]
