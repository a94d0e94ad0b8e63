"""Issue 65: the labelling loop against the real doccano (1.8.4, started by the test, acted in through its REST API
as its page does). export-tasks' tasks import with the model's answers as labels; people change, clear and add
labels; the ZIP doccano downloads comes back through import-annotations as exactly the rows and labels chosen, a
collaborative project's `all.jsonl` and another's per-annotator files alike (annotators who disagree: left out and
named)."""
import json

import pytest
from annotation_harness.doccano import NOT_INSTALLED, Doccano, installed
from conftest import train_tiny

from paddle_ft.cli import main
from paddle_ft.data.readers import Columns, read_examples

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not installed(), reason=NOT_INSTALLED)]


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    doccano = Doccano(tmp_path_factory.mktemp("doccano"))
    yield doccano
    doccano.stop()


def categories(tool, project, example, user="admin"):
    return tool.call("GET", f"/v1/projects/{project}/examples/{example}/categories", user=user)


def label(tool, project, example, label_id, user="admin"):
    tool.call("POST", f"/v1/projects/{project}/examples/{example}/categories", user=user, json={"label": label_id})


def test_export_tasks_go_into_doccano_and_its_zip_imports_exactly_what_people_chose(tool, tmp_path, capsys):
    best, data = train_tiny(tmp_path)
    texts = [e.text for e in read_examples(data / "test.tsv", "tsv", Columns())[0][:8]]
    texts[0], texts[1] = "等了\t一小时，\"很差\"", "第一行\n第二行，还行"
    source = tmp_path / "new.jsonl"
    source.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    assert main(["export-tasks", "--model", str(best), "--input", str(source), "--to", "doccano",
                 "--output-file", str(tmp_path / "tasks.jsonl")]) == 0
    ours = [json.loads(line) for line in (tmp_path / "tasks.jsonl").read_text(encoding="utf-8").splitlines()]

    project, ids = tool.create_project("paddle_ft collaborative", ("负面", "正面"), collaborative=True,
                                       single_label=True)
    examples = tool.import_file(project, tmp_path / "tasks.jsonl")
    assert [e["text"] for e in examples] == texts and [e["meta"] for e in examples] == [{"line": t["line"]}
                                                                                      for t in ours]
    names = {i: name for name, i in ids.items()}
    assert [[names[c["label"]] for c in categories(tool, project, e["id"])] for e in examples] == \
        [t["label"] for t in ours]  # the model's answers are the labels to correct

    other = {"负面": "正面", "正面": "负面"}
    chosen = [t["label"][0] for t in ours]
    chosen[0] = other[chosen[0]]
    label(tool, project, examples[0]["id"], ids[chosen[0]])  # corrected by the admin
    chosen[1] = other[chosen[1]]
    label(tool, project, examples[1]["id"], ids[chosen[1]], user="second")  # by the second annotator
    for category in categories(tool, project, examples[2]["id"]):  # cleared: nobody's answer
        tool.call("DELETE", f"/v1/projects/{project}/examples/{examples[2]['id']}/categories/{category['id']}")
    chosen[2] = None
    files = tool.export(project, tmp_path / "export.zip")
    assert list(files) == ["all.jsonl"]

    capsys.readouterr()
    assert main(["import-annotations", str(tmp_path / "export.zip"), "--from", "doccano", "--output-file",
                 str(tmp_path / "labelled.jsonl")]) == 0
    assert "imported 7 labelled texts" in capsys.readouterr().out
    back = [(e.text, e.label) for e in read_examples(tmp_path / "labelled.jsonl", "jsonl", Columns())[0]]
    assert back == [(text, answer) for text, answer in zip(texts, chosen) if answer]


def test_annotators_files_are_merged_and_a_text_they_disagree_on_is_left_out(tool, tmp_path, capsys):
    project, ids = tool.create_project("paddle_ft per annotator", ("负面", "正面"), collaborative=False,
                                       single_label=True)
    texts = ["甲很好", "乙太差", "丙一般", "丁还行"]
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t, "label": []}, ensure_ascii=False) + "\n"
                                                  for t in texts),
                                          encoding="utf-8")
    examples = tool.import_file(project, tmp_path / "texts.jsonl")
    label(tool, project, examples[0]["id"], ids["正面"])
    label(tool, project, examples[0]["id"], ids["负面"], user="second")  # they disagree
    label(tool, project, examples[1]["id"], ids["负面"])
    label(tool, project, examples[1]["id"], ids["负面"], user="second")  # they agree
    label(tool, project, examples[3]["id"], ids["正面"], user="second")  # one annotator only
    assert sorted(tool.export(project, tmp_path / "export.zip")) == ["admin.jsonl", "second.jsonl"]

    capsys.readouterr()
    assert main(["import-annotations", str(tmp_path / "export.zip"), "--from", "doccano", "--output-file",
                 str(tmp_path / "labelled.tsv")]) == 0
    log = capsys.readouterr().out
    assert "imported 2 labelled texts" in log and "1 tasks without an answer left out" in log, log
    assert f"1 texts whose annotators disagree left out (ids {examples[0]['id']}; " in log, log
    back = [(e.text, e.label) for e in read_examples(tmp_path / "labelled.tsv", "tsv", Columns())[0]]
    assert back == [("乙太差", "负面"), ("丁还行", "正面")]
