import csv
import json

import pytest

from paddle_ft.data.readers import Columns, format_of, read_examples
from paddle_ft.errors import DataError

COLUMNS = Columns("text", None, "label")
LABELS = frozenset({"负面", "正面"})


def read(path, fmt="tsv", columns=COLUMNS, labels=LABELS, on_bad_row="error"):
    return read_examples(path, fmt, columns, labels, on_bad_row, "data.on_bad_row=skip")


def write_bytes(tmp_path, data: bytes, name="d.tsv"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_tsv_rows_keep_their_line_numbers(tmp_path):
    path = write_bytes(tmp_path, "text\tlabel\n很好\t正面\n\n太差\t负面\n".encode())
    examples, report = read(path)
    assert [(e.text, e.label, e.line) for e in examples] == [("很好", "正面", 2), ("太差", "负面", 4)]
    assert report.rows == 2 and report.skipped == []


def test_csv_with_quoted_comma_and_text_pair(tmp_path):
    path = write_bytes(tmp_path, 'q,a,label\n"你好,世界",答案,正面\n问,"答,案",负面\n'.encode(), "d.csv")
    examples, _ = read(path, "csv", Columns("q", "a", "label"))
    assert [(e.text, e.text_pair, e.label) for e in examples] == [("你好,世界", "答案", "正面"), ("问", "答,案", "负面")]


def test_jsonl_and_utf8_bom(tmp_path):
    lines = [json.dumps({"text": "好", "label": "正面"}, ensure_ascii=False), json.dumps({"text": "差", "label": "负面"})]
    path = write_bytes(tmp_path, b"\xef\xbb\xbf" + "\n".join(lines).encode(), "d.jsonl")
    examples, _ = read(path, "jsonl")
    assert [(e.text, e.label) for e in examples] == [("好", "正面"), ("差", "负面")]


@pytest.mark.parametrize("name, data, fmt, line, reason", [
    ("missing column in header", "sentence\tlabel\n好\t正面\n", "tsv", 1,
     "the header has no column 'text' (tab-separated columns: sentence, label); set data.text_column"),
    ("missing key in jsonl", '{"text": "好", "label": "正面"}\n{"label": "负面"}\n', "jsonl", 2,
     "missing column 'text'"),
    ("empty text", "text\tlabel\n好\t正面\n  \t负面\n", "tsv", 3, "empty text in column 'text'"),
    ("unknown label", "text\tlabel\n好\t正面\n一般\t中性\n", "tsv", 3, "label '中性' is not one of 正面, 负面"),
    ("wrong field count", "text\tlabel\n好\t正面\n好\t的\t正面\n", "tsv", 3,
     "3 fields where the header has 2 (a stray tab inside a text?)"),
    ("broken json", '{"text": "好", "label": "正面"}\n{"text": "差",\n', "jsonl", 2, "not valid JSON"),
])
def test_bad_row_names_file_and_line(tmp_path, name, data, fmt, line, reason):
    path = write_bytes(tmp_path, data.encode(), f"d.{fmt}")
    with pytest.raises(DataError) as info:
        read(path, fmt)
    assert str(info.value).startswith(f"{path}:{line}: {reason}")


def test_undecodable_bytes_name_file_and_line(tmp_path):
    path = write_bytes(tmp_path, "text\tlabel\n好\t正面\n".encode() + "坏".encode("gbk") + "\t负面\n".encode())
    with pytest.raises(DataError, match=rf"^{path}:3: bytes that are not UTF-8 at byte 0; re-save the file as UTF-8"):
        read(path)


def test_skip_mode_counts_and_reports_every_bad_row(tmp_path):
    good = "".join(f"好{i}\t正面\n" for i in range(57)).encode()
    data = "text\tlabel\n好\t正面\n\t负面\n一般\t中性\n".encode() + b"\xff\xfe\t\xe6\xad\xa3\n" + "差\t负面\n".encode()
    path = write_bytes(tmp_path, data + good)
    examples, report = read(path, on_bad_row="skip")
    assert [e.text for e in examples[:2]] == ["好", "差"] and len(examples) == 59
    assert [line for line, _ in report.skipped] == [3, 4, 5]
    assert "3 bad rows skipped" in report.summary()


def test_skipping_more_than_a_small_share_is_an_error(tmp_path):
    path = write_bytes(tmp_path, "text\tlabel\n好\t正面\n一般\t中性\n差\t负面\n".encode())
    with pytest.raises(DataError, match=rf"^{path}:3: label '中性' .*; 1 of 3 rows are bad, more than "
                                        r"data.on_bad_row=skip drops \(5%\)"):
        read(path, on_bad_row="skip")


def test_quoted_csv_reads_back_exactly_what_pythons_csv_writer_wrote(tmp_path):
    import csv

    rows = [("great\nproduct", "正面"), ('say "hi", ok\tthen', "负面"), ("a\n\nb", "正面"), (" kept  ", "负面"),
            ("x\r\ny\rz", "正面")]
    path = tmp_path / "d.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "label"), *rows])
    examples, _ = read(path, "csv")
    assert [(e.text, e.label) for e in examples] == rows
    assert [e.line for e in examples] == [2, 4, 5, 8, 9]  # where each record starts


@pytest.mark.parametrize("on_bad_row", ["error", "skip"])
def test_an_unclosed_quote_is_reported_where_it_opened_and_never_skipped(tmp_path, on_bad_row):
    lines = ["text,label"] + [f"文本{i},正面" for i in range(40)]
    lines[2] = '"没有结束的引号,正面'  # line 3
    path = write_bytes(tmp_path, ("\n".join(lines) + "\n").encode(), "d.csv")
    with pytest.raises(DataError, match=rf"^{path}:3: a quote opened on this line is never closed"):
        read(path, "csv", labels=None, on_bad_row=on_bad_row)


def test_csv_undecodable_bytes_and_duplicate_header(tmp_path):
    path = write_bytes(tmp_path, "text,label\n好,正面\n".encode() + "坏".encode("gbk") + ",负面\n".encode(), "d.csv")
    with pytest.raises(DataError, match=rf"^{path}:3: column 'text' holds bytes that are not UTF-8"):
        read(path, "csv")
    path = write_bytes(tmp_path, "text\tlabel\ttext\n好\t正面\t差\n".encode())
    with pytest.raises(DataError, match=rf"^{path}:1: the header names the column 'text' twice"):
        read(path)


@pytest.mark.parametrize("line, reason", [
    ('{"text": NaN, "label": "正面"}', "not usable JSON (NaN is not a text or a label)"),
    ('{"text": "x", "label": Infinity}', "not usable JSON (Infinity is not a text or a label)"),
    ('{"text": "\\ud800", "label": "正面"}', "column 'text' holds bytes that are not UTF-8 or a lone surrogate"),
    ('{"text": ' + "7" * 5000 + ', "label": "正面"}', "not usable JSON (an integer of more digits than can be read)"),
    ('{"text": ' + "[" * 5000 + "]" * 5000 + "}", "not usable JSON (JSON nested too deeply)"),
    ('{"text": "x", "label": "正面", "text": "y"}', "not usable JSON (the key 'text' is given twice in one object)"),
])
def test_hostile_jsonl_rows_are_bad_rows_with_their_line(tmp_path, line, reason):
    path = write_bytes(tmp_path, ('{"text": "好", "label": "正面"}\n' + line + "\n").encode(), "d.jsonl")
    with pytest.raises(DataError) as info:
        read(path, "jsonl")
    assert str(info.value).startswith(f"{path}:2: {reason}")


def test_missing_file_and_unknown_extension(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read(tmp_path / "nope.tsv")
    with pytest.raises(DataError, match="cannot tell the format"):
        format_of(tmp_path / "data.xlsx")
    assert format_of(tmp_path / "x.JSONL") == "jsonl"


def test_file_of_only_bad_rows_is_an_error_even_when_skipping(tmp_path):
    path = write_bytes(tmp_path, "text\tlabel\n一般\t中性\n".encode())
    with pytest.raises(DataError, match="no usable rows"):
        read(path, on_bad_row="skip")


def test_a_csv_text_longer_than_pythons_field_limit_is_read_whole(tmp_path):
    long = "长" * 200_000  # Python's csv refuses fields over 131,072 characters unless told otherwise
    path = tmp_path / "long.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["text", "label"], [long, "好评"], ["短", "差评"]])
    examples, _ = read_examples(path, "csv", Columns())
    assert [len(e.text) for e in examples] == [200_000, 1]
