"""Issue 65: the labelling loop against the real Label Studio (1.23.2, started by the test, driven through its SDK).
export-tasks' tasks and labelling config go in as a user loads them and show as predictions with paddle_ft's model
version and score; people answer (single choice, several choices, a taxonomy path, a skipped task, two annotators
disagreeing); every export the tool offers for text classification (JSON, JSON-MIN, CSV, TSV) comes back through
import-annotations as exactly the rows and labels chosen."""
import json

import pytest
from annotation_harness.label_studio import NOT_INSTALLED, LabelStudio, installed
from conftest import train_tiny

from paddle_ft.cli import main
from paddle_ft.data.annotation import LabelSpace, Task, label_config, write_tasks
from paddle_ft.data.annotation_exports import read_annotations
from paddle_ft.data.readers import Columns, read_examples

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not installed(), reason=NOT_INSTALLED)]
FORMATS = {"JSON": "json", "JSON_MIN": "json", "CSV": "csv", "TSV": "tsv"}


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    label_studio = LabelStudio(tmp_path_factory.mktemp("label-studio"))
    yield label_studio
    label_studio.stop()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("labelling-model")
    return train_tiny(root)


def choice(*labels, kind="choices"):
    return [{"from_name": "label", "to_name": "text", "type": kind, "value": {kind: list(labels)}}]


def exported(tool, project, folder):
    """The project in every format, each file as the tool wrote it."""
    files = {}
    for name, suffix in FORMATS.items():
        files[name] = folder / f"{name.lower()}.{suffix}"
        assert tool.call("export", project=project, format=name, path=str(files[name])) > 0
    return files


def test_export_tasks_shows_in_label_studio_and_every_export_imports_exactly_what_people_chose(tool, model, tmp_path,
                                                                                              capsys):
    best, data = model
    texts = [e.text for e in read_examples(data / "test.tsv", "tsv", Columns())[0][:10]]
    texts[0], texts[1] = "等了\t一小时，\"很差\"", "第一行\n第二行，还行"  # a tab, quotes, a line break: kept by JSON Lines
    source = tmp_path / "new.jsonl"
    source.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    assert main(["export-tasks", "--model", str(best), "--input", str(source), "--to", "label-studio",
                 "--output-file", str(tmp_path / "tasks.json")]) == 0
    ours = json.loads((tmp_path / "tasks.json").read_text(encoding="utf-8"))
    project = tool.call("create_project", title="paddle_ft single choice",
                        label_config=(tmp_path / "tasks.label_config.xml").read_text(encoding="utf-8"))
    assert tool.call("import_tasks", project=project, tasks=ours) == 10
    shown = tool.call("tasks", project=project)
    assert [t["data"]["text"] for t in shown] == texts
    assert [t["predictions"] for t in shown] == [task["predictions"] for task in ours]  # model version, score, answer

    chosen = ["正面", "负面", "负面", "正面", "正面", "负面"]
    for task, label in zip(shown, chosen):
        tool.call("annotate", task=task["id"], result=choice(label))
    tool.call("annotate", task=shown[6]["id"], result=[], cancelled=True)  # skipped
    second = tool.call("create_user", username="second-annotator")
    tool.call("annotate", task=shown[7]["id"], result=choice("正面"))
    tool.call("annotate", task=shown[7]["id"], result=choice("负面"), completed_by=second)  # later: it is kept
    expected = [(text, label) for text, label in zip(texts, chosen + ["", "负面"]) if label]

    for name, path in exported(tool, project, tmp_path).items():
        out = tmp_path / f"labelled-{name}.jsonl"
        capsys.readouterr()
        assert main(["import-annotations", str(path), "--from", "label-studio", "--output-file", str(out)]) == 0, name
        log = capsys.readouterr().out
        assert "imported 7 labelled texts" in log and "1 tasks whose annotators disagree took the latest" in log, log
        back = [(e.text, e.label) for e in read_examples(out, "jsonl", Columns())[0]]
        assert back == expected, name


def test_several_choices_and_taxonomy_paths_come_back_from_every_export(tool, tmp_path):
    spaces = {"multi": LabelSpace(("物流", "价格, 便宜", "质量"), multi_label=True),
              "tree": LabelSpace(("电子/手机", "电子/电脑", "服装"), path_separator="/")}
    answers = {"multi": [("物流", "价格, 便宜"), ("质量",), ("物流", "质量", "价格, 便宜")],
               "tree": [("电子/手机",), ("服装",), ("电子/电脑",)]}
    texts = ["快递很快，也便宜", "面料\n很好", "屏幕\t清楚"]
    for name, space in spaces.items():
        tasks = [Task(text, None, labels, 0.6) for text, labels in zip(texts, reversed(answers[name]))]
        write_tasks(tmp_path / f"{name}.json", "label-studio", tasks, space)
        project = tool.call("create_project", title=f"paddle_ft {name}", label_config=label_config(space, False))
        assert tool.call("import_tasks", project=project,
                         tasks=json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))) == 3
        shown = tool.call("tasks", project=project)
        assert [t["predictions"][0]["result"][0]["value"] for t in shown] == \
            [space.result(task.labels)["value"] for task in tasks]
        for task, labels in zip(shown, answers[name]):
            tool.call("annotate", task=task["id"], result=[space.result(labels)])
        folder = tmp_path / name
        folder.mkdir()
        for fmt, path in exported(tool, project, folder).items():
            rows, report = read_annotations(path, "label-studio")
            assert [(r.text, r.labels) for r in rows] == list(zip(texts, answers[name])), (name, fmt)
            assert report.unlabelled == 0 and report.disagreeing == []
