"""Issue 45: Label Studio's and doccano's exports, as their documentation shows them, read exactly; what is not a
text-classification export is one line naming what was found."""
import json
from pathlib import Path

import pytest

from paddle_ft.data.annotation import LabelSpace, Task, label_config, write_tasks
from paddle_ft.data.annotation_exports import read_annotations
from paddle_ft.errors import DataError, UserError


def annotation(choices, updated="2021-03-09T22:16:08.746926Z", cancelled=False, kind="choices", name="sentiment"):
    """One annotation as Label Studio's JSON export writes it (docs: Label Studio JSON format of annotated tasks)."""
    return {"id": 1001, "result": [{"value": {kind: choices}, "id": "Dx_aB91ISN", "from_name": name,
                                    "to_name": "text", "type": kind, "origin": "manual"}],
            "was_cancelled": cancelled, "ground_truth": False, "created_at": "2021-03-09T21:52:49.513742Z",
            "updated_at": updated, "lead_time": 4.288, "result_count": 0, "task": 1, "completed_by": 10}


def label_studio_task(task_id, text, annotations, **data):
    return {"id": task_id, "data": {"text": text, **data}, "created_at": "2021-03-09T21:52:49.513742Z",
            "updated_at": "2021-03-09T22:16:08.746926Z", "project": 83, "annotations": annotations,
            "predictions": []}


def write_json(path, value):
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    return path


def test_label_studio_json_export_reads_choices_taxonomy_and_keeps_the_tasks_data(tmp_path):
    export = write_json(tmp_path / "export.json", [
        label_studio_task(1, "服务太差了\t等了一小时", [annotation(["负面"])], line=2),
        label_studio_task(2, "质量很好", [annotation(["正面", "物流"])], line=3),
        label_studio_task(3, "没标", []),
        label_studio_task(4, "跳过了", [annotation(["正面"], cancelled=True)]),
        label_studio_task(5, "手机屏幕很好", [annotation([["电子", "手机"]], kind="taxonomy")]),
    ])
    rows, report = read_annotations(export, "label-studio")
    assert [(r.text, r.labels, r.fields) for r in rows] == [
        ("服务太差了\t等了一小时", ("负面",), {"line": 2}), ("质量很好", ("正面", "物流"), {"line": 3}),
        ("手机屏幕很好", ("电子/手机",), {})]
    assert report.unlabelled == 2 and report.disagreeing == []


def test_label_studio_takes_the_latest_of_disagreeing_annotations_and_says_which(tmp_path):
    export = write_json(tmp_path / "export.json", [label_studio_task(7, "一般", [
        annotation(["正面"], updated="2021-03-10T10:00:00Z"), annotation(["负面"], updated="2021-03-11T10:00:00Z")])])
    rows, report = read_annotations(export, "label-studio")
    assert rows[0].labels == ("负面",) and report.disagreeing == [7]


def test_label_studio_json_min_reads_a_plain_choice_and_a_choices_object(tmp_path):
    export = write_json(tmp_path / "min.json", [
        {"id": 1, "text": "很好", "sentiment": "正面", "annotator": 1, "annotation_id": 1,
         "created_at": "2021-03-09T21:52:49Z", "updated_at": "2021-03-09T21:52:49Z", "lead_time": 2.1},
        {"id": 2, "text": "很差", "sentiment": {"choices": ["负面", "物流"]}, "annotator": 1, "annotation_id": 2,
         "created_at": "2021-03-09T21:52:49Z", "updated_at": "2021-03-09T21:52:49Z", "lead_time": 1.0},
    ])
    rows, _ = read_annotations(export, "label-studio", from_name="sentiment")
    assert [(r.text, r.labels, r.fields) for r in rows] == [("很好", ("正面",), {}), ("很差", ("负面", "物流"), {})]


def test_doccano_exports_read_as_its_documentation_writes_them(tmp_path):
    # doccano's own example (data_export/pipeline/examples.py) and an export row with its id and comments
    export = tmp_path / "export.jsonl"
    export.write_text('{"text": "Terrible customer service.", "label": ["negative"]}\n'
                      '{"text": "Really great transaction.", "label": ["positive"]}\n\n'
                      '{"id": 3, "text": "Great price.", "label": ["positive", "price"], "Comments": [], "line": 9}\n'
                      '{"id": 4, "text": "Not labelled yet.", "label": []}\n', encoding="utf-8")
    rows, report = read_annotations(export, "doccano")
    assert [(r.text, r.labels, r.fields) for r in rows] == [
        ("Terrible customer service.", ("negative",), {}), ("Really great transaction.", ("positive",), {}),
        ("Great price.", ("positive", "price"), {"line": 9})]
    assert report.unlabelled == 1
    as_list = write_json(tmp_path / "export.json", [{"text": "Terrible customer service.", "label": ["negative"]}])
    assert read_annotations(as_list, "doccano")[0][0].labels == ("negative",)


@pytest.mark.parametrize("tool, content, message", [
    ("doccano", '{"text": "EU rejects", "label": [[0, 2, "ORG"]]}\n', "not a list of label names (a sequence-"
                                                                        "labelling export?)"),
    ("doccano", '{"text": "旧版本", "annotations": [{"label": 3, "user": 1}]}\n',
     "no 'label' key (an older doccano's (label ids under 'annotations') export"),
    ("doccano", '{"text": "Find a flight", "entities": [], "cats": ["flight"]}\n', "an intent-detection export"),
    ("doccano", '{"text": "x", "label": ["a"]}\nnot json\n',
     "export.jsonl:2: not valid JSON (Expecting value at column 1); export the doccano project as JSONL"),
    ("label-studio", json.dumps([label_studio_task(1, "EU", [annotation(["ORG"], kind="labels")])]),
     "its results are of type labels, not choices or taxonomy"),
    ("label-studio", json.dumps({"text": "x"}), "a dict where Label Studio's JSON export is a list of objects"),
    ("label-studio", json.dumps([{"id": 1, "data": {"content": "x"}, "annotations": [annotation(["a"])]}]),
     "has no text under 'text' (its data's keys: content)"),
    ("label-studio", json.dumps([label_studio_task(1, "x", [{"result": [
        {"from_name": "a", "to_name": "text", "type": "choices", "value": {"choices": ["p"]}},
        {"from_name": "b", "to_name": "text", "type": "choices", "value": {"choices": ["q"]}}]}])]),
     "answers several control tags (a, b): choose one with --from-name"),
])
def test_what_is_not_a_classification_export_is_one_line(tmp_path, tool, content, message):
    path = tmp_path / "export.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError) as error:
        read_annotations(path, tool)
    assert message in str(error.value) and "\n" not in str(error.value)


SENTIMENT = LabelSpace(("负面", "正面"))


def test_tasks_carry_the_answer_as_a_prediction_and_their_fields_back(tmp_path):
    tasks = [Task("很好", None, ("正面",), 0.91234567, {"line": 2}), Task("一般", None, ("负面",), 0.5, {"line": 3})]
    written = write_tasks(tmp_path / "tasks.json", "label-studio", tasks, SENTIMENT)
    records = json.loads(written[0].read_text(encoding="utf-8"))
    assert records[0] == {"data": {"line": 2, "text": "很好"}, "predictions": [{
        "model_version": "paddle_ft", "score": 0.912346, "result": [{"from_name": "label", "to_name": "text",
                                                                    "type": "choices", "value": {"choices": ["正面"]}}]}]}
    assert written[1].read_text(encoding="utf-8") == label_config(SENTIMENT, False)
    assert '<Choices name="label" toName="text" choice="single"' in written[1].read_text(encoding="utf-8")
    lines = write_tasks(tmp_path / "tasks.jsonl", "doccano", tasks, SENTIMENT)[0].read_text(
        encoding="utf-8").splitlines()
    assert json.loads(lines[1]) == {"line": 3, "text": "一般", "label": ["负面"]}
    with pytest.raises(UserError, match="a text-pair model's tasks go to Label Studio"):
        write_tasks(tmp_path / "pairs.jsonl", "doccano", [Task("a", "b", ("x",), 1.0)], LabelSpace(("x",)))


def test_a_tree_model_s_tasks_are_a_taxonomy_its_answers_paths(tmp_path):
    tree = LabelSpace(("体育/足球", "体育/篮球", "财经"), path_separator="/")
    written = write_tasks(tmp_path / "tasks.json", "label-studio", [Task("进球了", None, ("体育/足球",), 0.8)], tree)
    result = json.loads(written[0].read_text(encoding="utf-8"))[0]["predictions"][0]["result"][0]
    assert result == {"from_name": "label", "to_name": "text", "type": "taxonomy",
                      "value": {"taxonomy": [["体育", "足球"]]}}
    assert written[1].read_text(encoding="utf-8") == (
        '<View>\n  <Text name="text" value="$text"/>\n'
        '  <Taxonomy name="label" toName="text" leafsOnly="true" maxUsages="1">\n'
        '    <Choice value="体育">\n      <Choice value="足球"/>\n      <Choice value="篮球"/>\n    </Choice>\n'
        '    <Choice value="财经"/>\n  </Taxonomy>\n</View>\n')


REAL_EXPORTS = Path(__file__).with_name("label_studio_1.23.2")  # written by Label Studio 1.23.2 itself


@pytest.mark.parametrize("name", ["export.json", "export-min.json", "export.csv", "export.tsv"])
def test_every_export_label_studio_offers_reads_as_the_tool_wrote_it(name):
    """Five tasks (a tab in each text): two annotators disagreeing on the first (the later one chose 正面), one skipped,
    one answered, two never opened. The flat exports give a row per annotation (the first task twice) and leave the
    skipped task out; each reads as the same two texts."""
    rows, report = read_annotations(REAL_EXPORTS / name, "label-studio")
    assert [(r.text, r.labels, str(r.fields["line"])) for r in rows] == [("文本0\t制表", ("正面",), "2"),
                                                                        ("文本2\t制表", ("正面",), "4")]
    assert [str(task) for task in report.disagreeing] == ["1"]
    assert report.unlabelled == (3 if name == "export.json" else 2)


DOCCANO_EXPORTS = Path(__file__).with_name("doccano_1.8.4")  # downloaded from doccano 1.8.4 itself


def test_doccano_s_zip_downloads_read_as_the_tool_wrote_them():
    """A collaborative project's all.jsonl (a tab, a line break and quotes in the texts, a label holding a comma); a
    project without collaboration gives a file per annotator: 甲 they labelled differently (left out, named), 乙 alike,
    丙 nobody."""
    rows, report = read_annotations(DOCCANO_EXPORTS / "collaborative-multi-label.zip", "doccano")
    assert [(r.text, r.labels, r.fields) for r in rows] == [
        ("很好\t制表", ("正面",), {"line": 2}), ("太差\n换行", ("负面",), {"line": 3}), ("一般 \"引号\"", ("a,b",), {"line": 4})]
    rows, report = read_annotations(DOCCANO_EXPORTS / "per-annotator.zip", "doccano")
    assert [(r.text, r.labels) for r in rows] == [("乙", ("负面",))]
    assert (report.unsettled, report.disagreeing, report.unlabelled) == ([7], [], 1)


def test_a_doccano_zip_that_is_not_an_export_is_one_line_naming_the_file_and_member(tmp_path):
    import zipfile

    for member, data, message in (("all.jsonl", "差评".encode("gbk"), "all.jsonl: bytes that are not UTF-8"),
                                  ("all.jsonl", b'{"text": "x", "label": []\n', "all.jsonl:1: "),
                                  ("notes.txt", b"x", "a ZIP without a .jsonl file"),
                                  ("all.json", b'{"text": "x"}', "all.json: not a list of objects")):
        path = tmp_path / "export.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(member, data)
        with pytest.raises(DataError) as error:
            read_annotations(path, "doccano")
        assert str(path) in str(error.value) and message in str(error.value) and "\n" not in str(error.value)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:  # doccano's JSON export: a list
        archive.writestr("all.json", json.dumps([{"id": 1, "text": "好", "label": ["正面"]}], ensure_ascii=False,
                                                indent=2))
    assert [(r.text, r.labels) for r in read_annotations(path, "doccano")[0]] == [("好", ("正面",))]
    damaged = path.read_bytes()
    start = damaged.index(b"PK\x03\x04") + 40
    path.write_bytes(damaged[:start] + bytes(30) + damaged[start + 30:])  # the member's bytes, not the directory
    with pytest.raises(DataError, match="a damaged ZIP"):
        read_annotations(path, "doccano")
