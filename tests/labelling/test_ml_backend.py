"""Issue 65: paddle_ft serve as Label Studio's ML backend, against the real tool. Connected from the project's
settings (with basic auth), it gives every task a pre-annotation with the served model's version and score; 30
annotations made through the tool's API reach it as webhooks, start a retraining in child processes, and the new
export, once it loads and passes its checks, answers in place of the old one: the tool's next predictions carry the
new model version."""
import base64
import json
import time

import httpx
import pytest
from annotation_harness.label_studio import NOT_INSTALLED, LabelStudio, installed
from bench.server_process import ServerProcess
from conftest import train_tiny

from paddle_ft.cli import main
from paddle_ft.data.annotation import LabelSpace, label_config
from paddle_ft.data.readers import Columns, read_examples
from paddle_ft.inference.predictor import Predictor

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not installed(), reason=NOT_INSTALLED)]
AUTH = ("label-studio", "backend-secret")
HEADERS = {"Authorization": "Basic " + base64.b64encode(":".join(AUTH).encode()).decode()}


def test_label_studio_gets_pre_annotations_and_a_retrained_model_from_paddle_ft(tmp_path, monkeypatch):
    best, data = train_tiny(tmp_path, (120, 40, 60))
    assert main(["export", "--model", str(best), "--output", str(tmp_path / "export"),
                 "--no-onnx"]) == 0
    pool = read_examples(data / "test.tsv", "tsv", Columns())[0]  # the texts people label, with their gold labels
    first = Predictor(tmp_path / "export").predict([e.text for e in pool])

    monkeypatch.setenv("PADDLE_FT_BASIC_AUTH", ":".join(AUTH))
    tool = LabelStudio(tmp_path / "label-studio", ML_BLOCK_LOCAL_IP="false", USE_DEFAULT_BANNED_SUBNETS="false")
    server = None
    try:
        server = ServerProcess(tmp_path / "export", tmp_path / "serve.log", "--threads", "1", "--label-studio",
                               tmp_path / "backend", "--retrain-every", "30")
        assert httpx.get(f"{server.url}/health").status_code == 401  # the protocol's routes need the auth
        served = httpx.get(f"{server.url}/v1/model").json()["model"]

        project = tool.call("create_project", title="paddle_ft backend",
                            label_config=label_config(LabelSpace(("负面", "正面")), False))
        assert tool.call("import_tasks", project=project, tasks=[{"data": {"text": e.text}} for e in pool]) == 60
        model = tool.call("connect_model", project=project, url=server.url, title="paddle_ft", basic_auth=AUTH)
        assert (model["state"], model["model_version"], model["error"]) == ("CO", served, None)  # connected
        assert tool.call("webhook_headers", project=project, headers=HEADERS) == [f"{server.url}/webhook"]

        tool.call("retrieve_predictions", project=project)
        shown = tool.call("tasks", project=project)
        predictions = [t["predictions"] for t in shown]
        assert all(len(p) == 1 and p[0]["model_version"] == served for p in predictions)
        assert [p[0]["result"][0]["value"]["choices"] for p in predictions] == [[a.label] for a in first]
        assert [p[0]["score"] for p in predictions] == pytest.approx([a.score for a in first], abs=1e-5)

        for task, example in zip(shown[:30], pool[:30]):
            tool.call("annotate", task=task["id"], result=[{"from_name": "label", "to_name": "text",
                                                            "type": "choices", "value": {"choices": [example.label]}}])
        last = wait_for_retraining(server.url)
        assert last["result"] == "served" and last["annotations"] == 30, last
        retrained = httpx.get(f"{server.url}/v1/model").json()["model"]
        assert retrained != served and (tmp_path / "backend" / "round-1" / "export").is_dir()
        rows = [json.loads(line) for line in (tmp_path / "backend" / "round-1" / "train.jsonl").read_text(
            encoding="utf-8").splitlines()]
        assert rows[-30:] == [{"text": e.text, "label": e.label} for e in pool[:30]] and len(rows) == 120 + 30

        tool.call("retrieve_predictions", project=project)  # the tool asks the retrained model for the rest
        assert tool.call("model", id=model["id"])["model_version"] == retrained
        versions = [{p["model_version"] for p in t["predictions"]} for t in tool.call("tasks", project=project)]
        assert all(retrained in v for v in versions[30:]), versions[30:]
        answer = httpx.post(f"{server.url}/v1/classify", json={"texts": [pool[0].text]}).json()
        assert answer["model"] == retrained

        # two more, then the model card's "Start Training": a second round at once, on all 32
        for task, example in zip(shown[30:32], pool[30:32]):
            tool.call("annotate", task=task["id"], result=[{"from_name": "label", "to_name": "text",
                                                            "type": "choices", "value": {"choices": [example.label]}}])
        tool.call("start_training", id=model["id"])
        last = wait_for_retraining(server.url, after=last)
        assert (last["round"], last["annotations"], last["result"]) == ("round-2", 32, "served"), last
    finally:
        if server is not None:
            assert server.stop() == 0
        tool.stop()


def wait_for_retraining(url: str, after: dict | None = None, timeout: float = 120.0) -> dict:
    """The retraining that ended after `after` (the last one seen)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = httpx.get(f"{url}/health", headers=HEADERS).json()
        if health["last_retraining"] not in (None, after) and not health["retraining"]:
            return health["last_retraining"]
        time.sleep(0.5)
    raise AssertionError(f"no retraining ended within {timeout:.0f} s")
