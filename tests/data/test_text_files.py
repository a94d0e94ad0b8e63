"""Issue 64, root 1: every file a user hands paddle_ft is read by one set of rules (data.text_files), whichever
command reads it: a BOM dropped, bytes that are not UTF-8 named by FILE:LINE, lines ending at "\\n" only, no comment
syntax inside data, a JSON key given twice refused, a FIFO refused without waiting on it."""
import json
import os
import threading

import pytest

from paddle_ft.data import text_files
from paddle_ft.data.annotation_exports import read_annotations
from paddle_ft.data.labels import read_label_descriptions, resolve_labels
from paddle_ft.data.readers import Columns, read_examples
from paddle_ft.errors import UserError

SEPARATORS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c"  # each a line break to str.splitlines, text to us


def label_studio_export(text="好评", choice="正面"):
    return [{"id": 1, "data": {"text": text}, "annotations": [
        {"id": 1, "result": [{"value": {"choices": [choice]}, "from_name": "sentiment", "to_name": "text",
                              "type": "choices"}], "was_cancelled": False, "updated_at": "2021-03-09T22:16:08Z"}]}]


def test_a_label_studio_export_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "export.json"
    path.write_bytes(text_files.BOM + json.dumps(label_studio_export(), ensure_ascii=False).encode("utf-8"))
    rows, _ = read_annotations(path, "label-studio")
    assert [(row.text, row.labels) for row in rows] == [("好评", ("正面",))]


def test_a_line_separator_inside_a_doccano_record_is_text_not_a_record_break(tmp_path):
    path = tmp_path / "export.jsonl"
    text = f"第一句{SEPARATORS}第二句"
    path.write_text(json.dumps({"id": 1, "text": text, "label": ["正面"]}, ensure_ascii=False) + "\n"
                    + json.dumps({"id": 2, "text": "差", "label": ["负面"]}, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    rows, _ = read_annotations(path, "doccano")
    assert [(row.text, row.labels) for row in rows] == [(text, ("正面",)), ("差", ("负面",))]


@pytest.mark.parametrize("tool, name, body", [
    ("doccano", "export.jsonl", '{"id": 1, "text": "好", "label": ["正面"]}\n{"id": 2, "text": "差", "label": ["负面"]}\n'),
    ("label-studio", "export.json", json.dumps(label_studio_export("差评", "负面"), ensure_ascii=False)),
])
@pytest.mark.parametrize("encoding", ["gbk", "latin-1"])
def test_an_export_in_another_encoding_is_one_line_naming_the_file_and_line(tool, name, body, encoding, tmp_path):
    path = tmp_path / name
    path.write_bytes(body.replace("差", "差é").encode(encoding, errors="replace"))
    with pytest.raises(UserError, match=rf"^{path}:\d+: bytes that are not UTF-8 at byte \d+; re-save the file as "
                                        "UTF-8$"):
        read_annotations(path, tool)


def test_a_doccano_error_names_doccano_and_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text('{"id": 1, "text": "好", "label": ["正面"], "label": ["负面"]}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"export\.jsonl:1: not usable JSON \(the key 'label' is given twice in one "
                                        r"object\); export the doccano project as JSONL \(its ZIP, or the \.jsonl "
                                        r"inside\)$"):
        read_annotations(path, "doccano")
    path.write_text("{broken\n", encoding="utf-8")
    with pytest.raises(UserError, match="doccano") as refused:
        read_annotations(path, "doccano")
    assert "Label Studio" not in str(refused.value)


def test_label_descriptions_take_a_hash_as_a_label_and_a_line_separator_as_text(tmp_path):
    path = tmp_path / "labels.tsv"
    path.write_text(f"#好评\t顾客满意{SEPARATORS[0]}称赞\n差评\t顾客不满\n\n", encoding="utf-8")
    assert read_label_descriptions(path) == {"#好评": f"顾客满意{SEPARATORS[0]}称赞", "差评": "顾客不满"}
    path.write_bytes("好评\t满意\n差评\t不满".encode("gbk"))
    with pytest.raises(UserError, match=rf"^{path}:1: bytes that are not UTF-8"):
        read_label_descriptions(path)


def test_a_label_file_of_data_labels_is_read_by_the_same_rules(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_bytes(text_files.BOM + "#正面\r\n负面\n".encode("utf-8"))
    assert resolve_labels(str(path), None).names == ("#正面", "负面")


def test_a_data_file_with_a_line_separator_in_a_text_keeps_one_row(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text(f"text\tlabel\n前{SEPARATORS}后\t正面\n差\t负面\n", encoding="utf-8")
    rows, _ = read_examples(path, "tsv", Columns("text", None, "label"))
    assert [(row.text, row.label) for row in rows] == [(f"前{SEPARATORS}后", "正面"), ("差", "负面")]


def test_a_fifo_or_a_folder_given_as_a_file_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "train.tsv"
    os.mkfifo(fifo)
    outcome = []

    def read():
        try:
            read_examples(fifo, "tsv", Columns("text", None, "label"))
        except UserError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome == [f"{fifo}: is not a regular file (a pipe or a device); give a file"]
    with pytest.raises(UserError, match=f"^{tmp_path}: is a folder; give a file$"):
        read_annotations(tmp_path, "doccano")
