"""Label Studio's ML backend protocol, served beside /v1/classify by `serve --export DIR --label-studio FOLDER`
(the shapes of label-studio-ml-backend's api.py and Label Studio 1.23's ml/api_connector.py):

    GET  /health    {"status": "UP", "model_version": ...}: Label Studio's "Validate and Save"
    POST /setup     {"project", "schema": the labelling config, ...} -> {"model_version"}; the config must offer every
                    label of the model (a Choices or Taxonomy tag over a Text tag), else 422
    POST /predict   {"tasks": [{"id", "data": {...}}], "label_config", ...} -> {"results": [{"result", "score",
                    "model_version"}], "model_version"}: one prediction a task, in order. A text the model abstains
                    on gets no pre-annotation (an empty result) and its low score; sorting the Data Manager by
                    prediction score, lowest first, puts first the texts select-texts' uncertainty strategy picks
    POST /webhook   Label Studio's webhook events: ANNOTATION_CREATED / ANNOTATION_UPDATED / ANNOTATIONS_CREATED record
                    the task's text and labels in FOLDER; ANNOTATIONS_DELETED forgets them; START_TRAINING (the model
                    card's "Start Training") retrains now. Every --retrain-every annotated tasks retrain as well.
    POST /train     the same "Start Training" from a Label Studio whose webhooks do not carry it (the tasks with
                    their annotations in the body)

With PADDLE_FT_BASIC_AUTH=user:password in the environment these answer only requests with that basic auth (Label
Studio's model settings: "Use basic auth"); /v1/classify and the probes are unchanged."""
from __future__ import annotations

import os
import secrets
import sys
import xml.etree.ElementTree as ElementTree
from base64 import b64decode
from dataclasses import dataclass

from fastapi import FastAPI, Request

from paddle_ft.errors import UserError
from paddle_ft.tokenization import readable

AUTH_VARIABLE = "PADDLE_FT_BASIC_AUTH"
FROM_NAME, TO_NAME, PAIR_KEY = "label", "text", "text_pair"  # the tags of the config export-tasks writes
ANNOTATED = ("ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_CREATED")


@dataclass(frozen=True)
class Tags:
    """Where a project's labelling config puts the answer: its control tag, the object it labels and the task data
    key that object shows."""
    from_name: str = FROM_NAME
    to_name: str = TO_NAME
    data_key: str = "text"
    kind: str = "choices"
    offered: frozenset[str] | None = None
    """The labels the control tag offers (a taxonomy's as paths joined by '/'); None when no config was read."""


def read_tags(config: str | None, separator: str = "/") -> Tags:
    """The first Choices or Taxonomy tag of a labelling config and the Text tag it labels; the defaults of the config
    export-tasks writes when there is none. A config that is not XML is a UserError."""
    if not config:
        return Tags()
    try:
        root = ElementTree.fromstring(config)
    except ElementTree.ParseError as exc:
        raise UserError(f"the project's labelling config is not XML ({exc})") from None
    control = next((tag for tag in root.iter() if tag.tag in ("Choices", "Taxonomy")), None)
    if control is None:
        raise UserError("the project's labelling config has no Choices or Taxonomy tag: paddle_ft answers text "
                        "classification projects (export-tasks writes their config)")
    to_name = control.get("toName", TO_NAME)
    shown = next((tag for tag in root.iter() if tag.get("name") == to_name), None)
    value = shown.get("value", "$text") if shown is not None else "$text"
    kind = control.tag.lower()
    return Tags(control.get("name", FROM_NAME), to_name, value.lstrip("$"), kind,
                frozenset(_offered(control, separator, kind == "taxonomy")))


def _offered(node, separator: str, tree: bool, path: tuple[str, ...] = ()) -> list[str]:
    names = []
    for choice in node.findall("Choice"):
        here = (*path, choice.get("value", ""))
        children = _offered(choice, separator, tree, here) if tree else []
        names.extend(children or [separator.join(here)])
    return names


def authorised(request: Request, credentials: str | None) -> bool:
    """Whether `request` carries the basic auth `credentials` (user:password); any request when there are none."""
    if credentials is None:
        return True
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return False
    try:
        given = b64decode(header[6:], validate=True).decode("utf-8")
    except ValueError:
        return False
    return secrets.compare_digest(given.encode(), credentials.encode())


def basic_auth_credentials() -> str | None:
    """PADDLE_FT_BASIC_AUTH's user:password, checked; None when it is not set."""
    value = os.environ.get(AUTH_VARIABLE)
    if value is not None and ":" not in value:
        raise UserError(f"{AUTH_VARIABLE} must be user:password (Label Studio's basic auth for the model)")
    return value


def add_routes(app: FastAPI, backend, slot, predict, error) -> None:
    """The protocol's routes on `app`. `backend` records annotations, starts retraining and makes results
    (workflows.label_studio_backend; the server side imports no training code); `predict(texts, pairs, predictor)`
    answers texts with the served model; `error(status, message, headers)` is the server's error response."""
    credentials = basic_auth_credentials()
    separator = backend.path_separator
    seen = {"tags": Tags()}  # the tags of the project's config last seen (/setup, /predict): a webhook's answer's

    def refused(request: Request):
        if authorised(request, credentials):
            return None
        return error(401, f"this Label Studio backend needs basic auth (Label Studio's model settings: the user and "
                          f"password of {AUTH_VARIABLE})", {"WWW-Authenticate": 'Basic realm="paddle_ft"'})

    @app.get("/health")
    async def health(request: Request):
        """Label Studio's check of the backend."""
        if (answer := refused(request)) is not None:
            return answer
        return {"status": "UP", "model_version": slot.version, **backend.state()}

    @app.post("/setup")
    async def setup(request: Request):
        if (answer := refused(request)) is not None:
            return answer
        body = await _json(request)
        try:
            tags = seen["tags"] = read_tags(body.get("schema"), separator)
        except UserError as exc:
            return error(422, str(exc))
        missing = sorted(set(backend.labels) - tags.offered) if tags.offered is not None else []
        if missing:
            message = (f"the project's labelling config does not offer the model's labels {', '.join(missing[:5])}; "
                       "paste the config export-tasks writes into Settings > Labeling Interface")
            print(f"error: Label Studio /setup: {message}", file=sys.stderr, flush=True)
            return error(422, message)
        if slot.predictor is None:
            return error(503, slot.status())
        return {"model_version": slot.version}

    @app.post("/predict")
    async def predict_tasks(request: Request):
        if (answer := refused(request)) is not None:
            return answer
        body = await _json(request)
        tasks = body.get("tasks")
        if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
            return error(422, "tasks must be a list of Label Studio tasks")
        if slot.predictor is None:
            return error(503, slot.status())
        try:
            tags = seen["tags"] = read_tags(body.get("label_config"), separator)
        except UserError as exc:
            return error(422, str(exc))
        predictor, version = slot.predictor, slot.version
        texts = [task_text(t, tags.data_key) for t in tasks]
        pairs = [task_text(t, PAIR_KEY) for t in tasks] if predictor.takes_text_pair else None
        usable = [i for i, text in enumerate(texts) if text is not None and readable(text)
                  and (pairs is None or (pairs[i] is not None and readable(pairs[i])))]
        answers = await predict([texts[i] for i in usable], None if pairs is None else [pairs[i] for i in usable],
                                predictor)
        threshold = predictor.meta.abstain_below
        results = [{"result": [], "score": 0.0, "model_version": version} for _ in tasks]  # no text: no answer
        for i, prediction in zip(usable, answers):
            results[i] = _prediction(prediction.deciding(threshold), tags, backend.result, version)
        return {"results": results, "model_version": version}

    @app.post("/webhook")
    async def webhook(request: Request):
        if (answer := refused(request)) is not None:
            return answer
        body = await _json(request)
        action, tags = body.get("action"), seen["tags"]
        if action in ANNOTATED:
            return {"status": "recorded", "annotations": backend.record(body, tags.from_name, tags.data_key)}
        if action == "ANNOTATIONS_DELETED":
            ids = [a.get("id") for a in as_list(body.get("annotation")) if isinstance(a, dict)]
            backend.forget([i for i in ids if isinstance(i, int)])
            return {"status": "recorded", "deleted": len(ids)}
        if action == "START_TRAINING":
            return {"status": "training" if backend.start_training() else "nothing new annotated"}
        return {"status": "ignored", "action": action}

    @app.post("/train")
    async def train(request: Request):
        if (answer := refused(request)) is not None:
            return answer
        body, tags = await _json(request), seen["tags"]
        for task in as_list(body.get("annotations")):
            if isinstance(task, dict):
                backend.record({"task": task, "annotation": task.get("annotations")}, tags.from_name, tags.data_key)
        return {"status": "training" if backend.start_training() else "nothing new annotated"}


async def _json(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}


def as_list(value) -> list:
    """A webhook field that is one object or a list of them, as a list."""
    return value if isinstance(value, list) else [value] if value is not None else []


def task_text(task: dict, key: str) -> str | None:
    """The string a Label Studio task's data holds under `key`; None if it holds none."""
    data = task.get("data")
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _prediction(prediction, tags: Tags, result_of, version: str) -> dict:
    """A prediction as Label Studio stores it: the model's answer as a result of the project's control tag
    (`result_of(labels)`), or none where the model abstains; its score how sure the model is."""
    if prediction.labels is not None:  # multi-label: the labels over their thresholds
        chosen = prediction.labels
        scores = [prediction.probabilities[label] for label in chosen]
        score = min(scores) if scores else prediction.score
    elif prediction.abstained:
        chosen = (prediction.answer[0],) if prediction.answer is not None else ()  # a tree's sure parent, or nothing
        score = prediction.score
    else:
        chosen, score = (prediction.label,), prediction.score
    result = {**result_of(chosen), "from_name": tags.from_name, "to_name": tags.to_name} if chosen else None
    return {"result": [result] if result else [], "score": round(float(score), 6), "model_version": version}
