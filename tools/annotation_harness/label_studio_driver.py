"""Runs in Label Studio's own environment (.venv-label-studio): hands on the real tool, through its SDK
(label-studio-sdk). One JSON request a line on stdin, one JSON answer a line on stdout:
{"op": NAME, ...arguments} -> {"ok": value} or {"error": "..."}. Kept apart from paddle_ft's environment: Label
Studio pins Django, numpy and pytz versions of its own."""
import json
import sys
import traceback

from label_studio_sdk import LabelStudio


def main() -> None:
    url, token = sys.argv[1], sys.argv[2]
    tool = LabelStudio(base_url=url, api_key=token, timeout=120)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": OPERATIONS[request.pop("op")](tool, **request)}
        except Exception as exc:  # the test gets the tool's refusal as a value, and the driver keeps serving
            answer = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        print(json.dumps(answer, ensure_ascii=False, default=str), flush=True)


def create_project(tool, title, label_config):
    return tool.projects.create(title=title, label_config=label_config).id


def import_tasks(tool, project, tasks):
    return tool.projects.import_tasks(id=project, request=tasks).task_count


def tasks(tool, project):
    """Every task as the tool shows it: its data, the predictions (model version, score, result), its annotations."""
    return [{"id": t.id, "data": t.data,
             "predictions": [{key: getattr(p, key) for key in ("model_version", "score", "result")}
                             for p in t.predictions],
             "annotations": len(t.annotations or [])}
            for t in tool.tasks.list(project=project, fields="all")]


def create_user(tool, username):
    return tool.users.create(username=username, email=f"{username}@example.com").id


def annotate(tool, task, result, cancelled=False, completed_by=None):
    extra = {} if completed_by is None else {"completed_by": completed_by}
    return tool.annotations.create(id=task, result=result, was_cancelled=cancelled, **extra).id


def export(tool, project, format, path):
    """The project exported as a person downloads it (every task, annotated or not), written to `path`."""
    data = b"".join(tool.projects.exports.download_sync(project, export_type=format, download_all_tasks=True))
    with open(path, "wb") as out:
        out.write(data)
    return len(data)


def connect_model(tool, project, url, title, basic_auth=None):
    """The project's Settings > Model > Connect Model."""
    auth = {} if basic_auth is None else {"auth_method": "BASIC_AUTH", "basic_auth_user": basic_auth[0],
                                          "basic_auth_pass": basic_auth[1]}
    backend = tool.ml.create(project=project, url=url, title=title, is_interactive=False, **auth)
    return _model_state(tool.ml.get(backend.id))


def model(tool, id):
    return _model_state(tool.ml.get(id))


def _model_state(backend):
    return {"id": backend.id, "state": backend.state, "model_version": backend.model_version,
            "error": backend.error_message}


def webhook_headers(tool, project, headers):
    """The project's Settings > Webhooks: the headers of every webhook of the project (the ML backend's needs its
    basic auth: Label Studio makes that webhook without it)."""
    hooks = [hook for hook in tool.webhooks.list(project=str(project)) if hook.project == project]
    for hook in hooks:
        tool.webhooks.update(id=hook.id, headers=headers, url=hook.url)
    return [hook.url for hook in hooks]


def retrieve_predictions(tool, project):
    """The Data Manager's action "Retrieve Predictions" on every task."""
    tool.actions.create(id="retrieve_tasks_predictions", project=project, selected_items={"all": True, "excluded": []})
    return True


def start_training(tool, id):
    """The model card's "Start Training"."""
    tool.ml.train(id=id)
    return True


OPERATIONS = {f.__name__: f for f in (create_project, import_tasks, tasks, create_user, annotate, export,
                                      connect_model, model, webhook_headers, retrieve_predictions,
                                      start_training)}

if __name__ == "__main__":
    main()
