"""The FastAPI application: POST /v1/classify, GET /healthz, /readyz, /metrics, /openapi.json.

Every error, of every status, answers JSON `{"error": {"status": N, "message": "..."}}`: a body that is
not JSON (malformed, not UTF-8, too deeply nested, an unreadable number), wrong types, an empty list,
too many texts, an empty text or one that is not valid Unicode 422; unknown path 404; wrong method 405;
a body sent too slowly 408; too large a body 413; a full queue or a model still loading 503 with
Retry-After; a failure of the model itself 500, for the request that caused it only. Input never
crashes the server.
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, StrictStr, WithJsonSchema
from starlette.exceptions import HTTPException

from paddle_ft.artifacts.export_folder import EXPORT_INFO
from paddle_ft.artifacts.manifest import MANIFEST
from paddle_ft.errors import UserError
from paddle_ft.inference.agreement import export_problems
from paddle_ft.inference.drift import text_length
from paddle_ft.io import file_sha256
from paddle_ft.serve.batcher import DynamicBatcher, QueueFull
from paddle_ft.serve.label_studio import add_routes as add_label_studio_routes
from paddle_ft.serve.metrics import Metrics
from paddle_ft.serve.monitor import TrafficMonitor
from paddle_ft.serve.options import Limits
from paddle_ft.tokenization import check_texts, readable_pattern

# Text and count limits are documented in the schema but checked by the handler, not by pydantic, so
# that each answer says how to fix the request. The pattern is the rule the handler applies (`readable`).
VisibleText = Annotated[StrictStr, WithJsonSchema({"type": "string", "pattern": readable_pattern(),
                                                   "description": "a text with at least one letter, digit, "
                                                                  "punctuation mark or symbol"})]


def _json_integer(value):
    """An integer as JSON Schema means it: 2 and 2.0, not 2.5, "2" or true."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("Input should be a valid integer")


JsonInteger = Annotated[int, PlainValidator(_json_integer), WithJsonSchema({"type": "integer"})]


def _json_number(value):
    """A number as JSON Schema means it: 0.5 and 1, not "0.5" or true."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError("Input should be a valid number")


JsonNumber = Annotated[float, PlainValidator(_json_number), WithJsonSchema({"type": "number"})]


RENAMED_FIELDS = {"text_pairs": "text_pair"}  # a client of the old name gets the new one, not "extra input"


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[VisibleText] = Field(description="texts to classify, at most max_texts of them",
                                     json_schema_extra={"minItems": 1})
    text_pair: list[VisibleText] | None = Field(None, description="for a model trained on text pairs: the second "
                                                                   "text of each text, in the same order")
    top_k: JsonInteger = Field(1, description="labels returned per text, best first (at most the number of labels)",
                               json_schema_extra={"minimum": 1})
    abstain_below: JsonNumber | None = Field(
        None, description="a single-label model: mark an answer whose top probability is below this \"abstained\" "
                          "(default: the model's own threshold, if it has one)",
        json_schema_extra={"minimum": 0, "maximum": 1})


class LabelScore(BaseModel):
    label: str
    score: float


class Classification(BaseModel):
    label: str | None = Field(None, description="the most probable label (a single-label model)")
    score: float | None = Field(None, description="its probability (a single-label model)")
    labels: list[str] | None = Field(None, description="a multi-label model's answer: the labels whose probability "
                                                       "reaches their threshold, most probable first (maybe none)")
    probabilities: dict[str, float] = Field(description="every label's probability (a multi-label model: each "
                                                        "label's own, not summing to 1); of a model of more than "
                                                        "100 labels, the 20 most probable ones, best first")
    truncated: bool = Field(description="the text was longer than the model's max_length and was cut")
    windows: int = Field(1, description="the windows of max_length the text was read in (more than 1 only for a "
                                        "model trained with data.truncation sliding_window)")
    abstained: bool | None = Field(None, description="under an abstain threshold: the model is not sure enough, "
                                                     "a person should decide (the top label is still given)")
    top_k: list[LabelScore] | None = Field(None, description="the top_k labels, when top_k > 1")
    path: list[LabelScore] | None = Field(None, description="a model of labels written as paths of a tree: the top "
                                                            "label's path, top level first, each node's probability")
    answer: LabelScore | None = Field(None, description="a tree of labels under an abstain threshold: the deepest "
                                                        "node sure enough (the leaf, else a parent); null if none is")


class ClassifyResponse(BaseModel):
    model: str = Field(description="the model that gave every answer of this response: its export folder's name and "
                                   "the start of its manifest's sha256 (GET /v1/model; a reload changes it)")
    results: list[Classification]


class ErrorBody(BaseModel):
    status: int
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, by Content-Length or counted as it streams in
    (chunked uploads declare none); 408 for a body not complete within `timeout_s`. The body is read
    here first, then handed on to the app."""

    def __init__(self, app, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(scope, receive, send)
        messages, seen = [], 0
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                response = error(408, f"the request body did not arrive within {self.timeout_s:g} s",
                                 {"Connection": "close"})
                return await response(scope, receive, send)
            messages.append(message)
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                return await self._refuse(scope, receive, send)
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send):
        response = error(413, f"request body over {self.max_bytes} bytes; send fewer or shorter texts")
        await response(scope, receive, send)


class ModelSlot:
    """The predictor once it has loaded (on a worker thread, so /healthz answers meanwhile), or why it
    has not; and on SIGHUP, the model its folder holds now, checked and warmed up before it is swapped in
    (`reload`). A request keeps the predictor it started with to its end, so in-flight requests finish on the old
    model, and each answer says which model gave it (`version`)."""

    def __init__(self, load_predictor: Callable[..., object], metrics: Metrics, export_dir: str | Path | None = None):
        self._load_predictor, self._metrics = load_predictor, metrics
        self._export_dir = export_dir  # what a reload reads when no model ever loaded
        self.predictor, self.load_error, self.version, self.loaded_at = None, None, None, None
        self._reloading = asyncio.Lock()

    def _load(self) -> None:
        try:
            self._swap(self._load_predictor())
            self._metrics.ready.set(1)
            print(f"model {self.version} loaded; engine: {engine_of(self.predictor)}", file=sys.stderr, flush=True)
        except Exception as exc:  # reported by /readyz and the log; the process stays up to say so
            self.load_error = f"{type(exc).__name__}: {exc}"
            print(f"error: the model failed to load: {self.load_error}", file=sys.stderr, flush=True)

    def _swap(self, predictor) -> None:
        version = model_version(predictor.export_dir)
        self.predictor, self.version, self.loaded_at = predictor, version, time.time()

    async def load(self) -> None:
        with _paddle_keeps_off_our_signals():
            await asyncio.to_thread(self._load)

    async def reload(self, export_dir: str | Path | None = None) -> bool:
        """The model the export folder holds now (or the one in `export_dir`: a retraining's), if it is what was
        written (its files against its manifest, its engines against each other) and loads; otherwise the one serving
        keeps serving. True once swapped."""
        async with self._reloading:
            folder = export_dir or (self.predictor.export_dir if self.predictor is not None else self._export_dir)
            try:
                problems = await asyncio.to_thread(export_problems, folder) if folder else ["no export folder known"]
                if problems:
                    raise ValueError(problems[0])
                with _paddle_keeps_off_our_signals():
                    fresh = await asyncio.to_thread(self._load_predictor, folder)
                if self.predictor is not None and (change := request_shape_change(self.predictor, fresh)):
                    raise ValueError(f"{change}: the clients' requests would no longer fit; restart the server to "
                                     "change what it is asked")
            except Exception as exc:
                self._metrics.reloads.labels(result="refused").inc()
                serving = f"{self.version} keeps serving" if self.predictor is not None else "still no model"
                print(f"error: reload refused, {serving}: {exc}", file=sys.stderr, flush=True)
                return False
            self._swap(fresh)
            self.load_error = None
            self._metrics.ready.set(1)
            self._metrics.reloads.labels(result="swapped").inc()
            print(f"reloaded {folder}: now serving {self.version}", file=sys.stderr, flush=True)
            return True

    def status(self) -> str:
        return "loading" if self.load_error is None else f"failed to load: {self.load_error}"


def request_shape_change(served, fresh) -> str | None:
    """What a swap from `served` to `fresh` would change in the requests the service accepts or the answers it
    gives (single texts or pairs, one label or a set), said as a reason; None when they read and answer alike."""
    old, new = served.meta, fresh.meta
    if old.takes_text_pair != new.takes_text_pair:
        kinds = ("text pairs", "single texts")
        return (f"the new model classifies {kinds[not new.takes_text_pair]}, the served one "
                f"{kinds[not old.takes_text_pair]}")
    if old.multi_label != new.multi_label:
        return (f"the new model answers {'label sets' if new.multi_label else 'one label'}, the served one "
                f"{'label sets' if old.multi_label else 'one label'}")
    return None


@contextmanager
def _paddle_keeps_off_our_signals():
    """Creating a Paddle predictor installs Paddle's own C handler for SIGTERM, which would kill the process
    instead of letting uvicorn drain it: put the handlers back afterwards (on the main thread)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def engine_of(predictor) -> str:
    """Which engine runs which calls (`Predictor.engine_description`; a stand-in predictor may have none)."""
    return getattr(predictor, "engine_description", "unknown")


def model_version(export_dir) -> str:
    """Which model answers: the export's folder name and the first 12 hex digits of the sha256 of its manifest
    (of export.json for an export without one), so two versions in the same folder differ."""
    folder = Path(export_dir).resolve()
    seal = folder / MANIFEST if (folder / MANIFEST).is_file() else folder / EXPORT_INFO
    return f"{folder.name}@{file_sha256(seal)[:12]}"


def create_app(load_predictor: Callable[..., object], limits: Limits = Limits(),
               truncation: str | None = None, export_dir: str | Path | None = None,
               label_studio: Callable[[ModelSlot], object] | None = None) -> FastAPI:
    """`load_predictor(folder=export_dir)` returns a warmed-up `Predictor` of an export; it runs on a worker thread,
    so that /healthz answers while the model loads and /readyz says when it is ready. `label_studio(slot)` makes the
    Label Studio ML backend (workflows.label_studio_backend) whose protocol serve/label_studio.py adds."""
    metrics = Metrics()
    slot = ModelSlot(load_predictor, metrics, export_dir)
    monitor = TrafficMonitor(metrics.registry)

    def run_batch(items: list[tuple[str, str | None, object]]) -> list:
        """The (text, second text or None, predictor) items of a batch, each on the predictor its request started
        with: one call per predictor (two only while a reload swaps them)."""
        results = [None] * len(items)
        for predictor in {id(item[2]): item[2] for item in items}.values():
            positions = [i for i, item in enumerate(items) if item[2] is predictor]
            pairs = [items[i][1] for i in positions]
            answers = predictor.predict([items[i][0] for i in positions], batch_size=limits.max_batch_size,
                                        truncation=truncation, text_pair=None if pairs[0] is None else pairs)
            for i, answer in zip(positions, answers):
                results[i] = answer
        return results

    def cost(item: tuple[str, str | None, object]) -> int:
        """The tokens the model reads of an item: what it takes of a batch's budget."""
        return reading_cost(item[2], truncation, item[:2])

    batcher = DynamicBatcher(run_batch, limits.max_batch_size, limits.max_wait_ms, limits.max_queue_texts,
                             on_batch=metrics.batch_sizes.observe, max_batch_tokens=limits.max_batch_tokens,
                             cost=cost, max_request_share=limits.max_request_share)
    metrics.queue_depth.set_function(lambda: batcher.queued_texts)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        loader = loop.create_task(slot.load())
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no SIGHUP (Windows, a thread)
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(slot.reload()))
        batcher.start()
        yield
        if getattr(app.state, "label_studio", None) is not None:
            await app.state.label_studio.stop()  # a retraining's child processes end with the server
        await batcher.stop()  # uvicorn has let in-flight requests finish; nothing is queued by now
        await loader

    app = FastAPIOffline(title="paddle_ft text classification", version="1", lifespan=lifespan,
                         responses={status: {"model": ErrorResponse} for status in (404, 405, 408, 413, 422, 500, 503)})
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, timeout_s=limits.read_timeout_s)
    app.add_middleware(RequestCounter, metrics=metrics)
    _answer_errors_as_json(app)
    retry = {"Retry-After": str(limits.retry_after_s)}

    @app.post("/v1/classify", response_model=ClassifyResponse, response_model_exclude_none=True)
    async def classify(body: ClassifyRequest):
        if slot.predictor is None:
            return error(503, "the model is still loading" if slot.load_error is None else
                         f"the model failed to load: {slot.load_error}", retry)
        predictor, version = slot.predictor, slot.version  # this request's model, to its end, across any reload
        problem = _request_problem(body, predictor, limits, truncation)  # before it joins a batch: a bad text
        if problem is not None:                                          # must not fail others
            return error(422, problem)
        items = list(zip(body.texts, body.text_pair or [None] * len(body.texts)))  # (text, second text or None)
        try:
            results = await batcher.submit([(text, pair, predictor) for text, pair in items])
        except QueueFull as exc:
            return error(503, f"server busy: {exc}; retry later", retry)
        except Exception as exc:  # this batch failed; other requests are unaffected
            metrics.errors.inc()
            return error(500, f"prediction failed: {type(exc).__name__}: {exc}")
        metrics.texts.inc(len(body.texts))
        threshold = predictor.check_abstain_below(body.abstain_below)  # checked before it joined a batch
        answers = [p.deciding(threshold) for p in results]
        monitor.observe(predictor, items, answers)
        return {"model": version, "results": [p.as_dict(body.top_k) for p in answers]}

    _add_probes(app, slot, metrics, retry)
    if label_studio is not None:
        backend = label_studio(slot)

        async def predict(texts: list[str], pairs: list[str] | None, predictor) -> list:
            """The texts on `predictor` through the batcher, a request's worth at a time (a Label Studio project
            sends all its tasks in one)."""
            answers = []
            for start in range(0, len(texts), limits.max_texts):
                chunk = range(start, min(start + limits.max_texts, len(texts)))
                answers += await batcher.submit([(texts[i], None if pairs is None else pairs[i], predictor)
                                                 for i in chunk])
            return answers

        add_label_studio_routes(app, backend, slot, predict, error)
        app.state.label_studio = backend
    app.openapi = lambda: _openapi(app, limits, slot.predictor)
    app.state.batcher, app.state.metrics = batcher, metrics
    return app


def _add_probes(app: FastAPI, slot: ModelSlot, metrics: Metrics, retry: dict) -> None:
    @app.get("/healthz")
    async def healthz():
        """The process is up (the model may still be loading)."""
        return {"status": "ok"}

    @app.get("/v1/model")
    async def model():
        """Which model answers (after a SIGHUP reload, the new one), since when, and its labels."""
        if slot.predictor is None:
            return error(503, slot.status(), retry)
        return {"model": slot.version, "export": str(slot.predictor.export_dir), "loaded_at": slot.loaded_at,
                "labels": list(slot.predictor.labels), "engine": engine_of(slot.predictor)}

    @app.get("/readyz")
    async def readyz():
        """The model is loaded and warmed up: send traffic."""
        return {"status": "ready"} if slot.predictor is not None else error(503, slot.status(), retry)

    @app.get("/metrics", response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition format"}})
    async def prometheus():
        return PlainTextResponse(metrics.render(), media_type=metrics.content_type)


def _request_problem(body: ClassifyRequest, predictor, limits: Limits, truncation: str | None) -> str | None:
    """What is wrong with a request that pydantic let through, as the 422 message; None when it is fine."""
    if not body.texts:
        return "texts is empty; send at least one text"
    try:
        check_texts(body.texts, "texts[{}]")
        if body.text_pair is not None:
            check_texts(body.text_pair, "text_pair[{}]")
        predictor.check_text_pair(body.texts, body.text_pair, truncation)
        predictor.check_abstain_below(body.abstain_below)
    except UserError as exc:
        return str(exc)
    if len(body.texts) > limits.max_texts:
        return f"{len(body.texts)} texts in one request; the limit is {limits.max_texts}: split it"
    tokens = sum(reading_cost(predictor, truncation, item)
                 for item in zip(body.texts, body.text_pair or [None] * len(body.texts)))
    if tokens > limits.max_request_tokens:
        return (f"the model would read about {tokens} tokens of this request; the limit is "
                f"{limits.max_request_tokens} (--max-request-tokens): send fewer or shorter texts")
    if not 1 <= body.top_k <= len(predictor.labels):
        return f"top_k={body.top_k}: give 1 to {len(predictor.labels)}"
    return None


def reading_cost(predictor, truncation: str | None, item: tuple[str, str | None]) -> int:
    """About how many tokens the model reads of a (text, second text) item, under the server's truncation."""
    text, pair = item
    return predictor.truncation_rule(truncation).tokens_read(text_length(text, pair), predictor.max_length)


class RequestCounter:
    """ASGI middleware: each answer of /v1/classify counted by status, and the time to its headers observed. Plain
    ASGI rather than `@app.middleware("http")`, Starlette's BaseHTTPMiddleware, which streams every response
    through a task and a memory channel of its own (one client's requests to e5-small's shape on a 2-core AMD EPYC,
    medians of six rounds: 12.1 -> 11.6 ms a request, where a plain FastAPI + ONNX Runtime server took 11.3)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/v1/classify":
            return await self.app(scope, receive, send)
        started = time.perf_counter()

        async def counted(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(status=str(message["status"])).inc()
                self.metrics.latency.observe(time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, counted)


def _answer_errors_as_json(app: FastAPI) -> None:
    """Every error, whoever raises it (pydantic, Starlette, a bug), in the documented `ErrorResponse` shape."""
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        if "json" not in request.headers.get("content-type", ""):
            return error(422, "the body must be JSON sent with Content-Type: application/json, "
                              "like {\"texts\": [\"...\"]}")
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            where = next(e for e in exc.errors() if e["type"] == "json_invalid")["loc"][-1]
            return error(422, f"the body is not valid JSON (at character {where}); send {{\"texts\": [\"...\"]}}")
        renamed = [e["loc"][1] for e in exc.errors() if e["type"] == "extra_forbidden" and e["loc"][1:] and
                   e["loc"][1] in RENAMED_FIELDS]
        if renamed:
            old = renamed[0]
            return error(422, f"{old} is now called {RENAMED_FIELDS[old]}: send {RENAMED_FIELDS[old]} instead")
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors())
        return error(422, f"invalid request ({problems}); send JSON like {{\"texts\": [\"...\"]}}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 400:  # FastAPI could not decode the body: bad UTF-8 or charset, too deep, huge number
            return error(422, "the body is not JSON that can be read (UTF-8, not nested too deeply, numbers of "
                              "sensible size); send {\"texts\": [\"...\"]}")
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception):  # a bug; the client still gets the documented shape
        print(f"error: {request.method} {request.url.path} failed: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        return error(500, f"internal error ({type(exc).__name__}); the server log has the details")


def _openapi(app: FastAPI, limits: Limits, predictor) -> dict:
    """FastAPI's schema plus what this server's model and limits allow: max_texts, and once the model is
    loaded the number of labels and whether it takes text_pair (until then it is not cached)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    component = schema["components"]["schemas"]["ClassifyRequest"]
    component["properties"]["texts"]["maxItems"] = limits.max_texts
    if predictor is None:
        return schema
    component["properties"]["top_k"]["maximum"] = len(predictor.labels)
    answer = ("labels",) if predictor.meta.multi_label else ("label", "score")  # what this model's results hold
    result = schema["components"]["schemas"]["Classification"]
    for name in {"label", "score", "labels"} - set(answer):
        result["properties"].pop(name)
    if predictor.meta.multi_label:  # it answers with label sets: no abstaining
        component["properties"].pop("abstain_below")
        result["properties"].pop("abstained")
    if predictor.meta.multi_label or predictor.meta.hierarchy is None:
        result["properties"].pop("path")
        result["properties"].pop("answer")
    result["required"] = sorted({*result.get("required", []), *answer})
    if predictor.takes_text_pair:  # a pair model needs them (one per text: checked by the handler)
        component["required"] = sorted({*component.get("required", []), "text_pair"})
    else:  # a single-text model takes none: the field is not part of its API
        component["properties"].pop("text_pair")
    app.openapi_schema = schema
    return schema
