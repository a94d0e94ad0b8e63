"""The HTTP service, tested against a real server process on 127.0.0.1, and the one-line Classifier."""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from bench.server_process import ServerProcess, free_port, wait_until_ready
from conftest import NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS, export_tiny_model

ROOT = Path(__file__).resolve().parents[2]
CHARS = POSITIVE_CHARS + NEGATIVE_CHARS + NEUTRAL_CHARS

pytestmark = pytest.mark.slow  # every test here starts processes


def _texts(n: int, seed: int, longest: int = 40) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(CHARS) for _ in range(rng.randint(1, longest))) for _ in range(n)]


class Server(ServerProcess):
    def __init__(self, export_dir: Path, log: Path, *options: str):
        super().__init__(export_dir, log, "--threads", "1", *options)

    def classify(self, texts, client=None, **extra):
        return (client or httpx).post(f"{self.url}/v1/classify", json={"texts": texts, **extra}, timeout=60)


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    return export_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def predictor(export_dir):
    from paddle_ft.inference.options import PredictOptions
    from paddle_ft.inference.predictor import Predictor

    return Predictor(export_dir, PredictOptions(cpu_threads=1))


@pytest.fixture(scope="module")
def server(export_dir, tmp_path_factory):
    server = Server(export_dir, tmp_path_factory.mktemp("log") / "server.log", "--max-texts", "16",
                    "--max-body-bytes", "20000", "--max-wait-ms", "10", "--max-request-tokens", "900")
    yield server
    assert server.stop() == 0


def _assert_same(results: list[dict], expected: list[dict]) -> None:
    assert [r["label"] for r in results] == [e["label"] for e in expected]
    for r, e in zip(results, expected):
        assert r["truncated"] == e["truncated"]
        for name, p in e["probabilities"].items():
            assert abs(r["probabilities"][name] - p) < 1e-5


def test_results_equal_the_predictor_in_request_order(server, predictor):
    texts = _texts(12, seed=1) + ["好" * 100]  # the last one is longer than max_length 64
    response = server.classify(texts)
    assert response.status_code == 200
    results = response.json()["results"]
    _assert_same(results, [p.as_dict() for p in predictor.predict(texts)])
    assert results[-1]["truncated"] is True and results[0]["truncated"] is False
    top = server.classify(texts[:2], top_k=2).json()["results"]
    assert [len(r["top_k"]) for r in top] == [2, 2] and top[0]["top_k"][0]["label"] == top[0]["label"]


def test_32_concurrent_clients_2000_requests_all_correct_and_batched(server, predictor):
    pool = _texts(300, seed=2)
    expected = dict(zip(pool, (p.as_dict() for p in predictor.predict(pool))))
    rng = random.Random(3)
    requests = [rng.sample(pool, rng.randint(1, 8)) for _ in range(2000)]
    before = _metric(server, "paddle_ft_batch_size_texts_count")

    def send(chunk):
        with httpx.Client() as client:
            return [(texts, server.classify(texts, client)) for texts in chunk]

    with ThreadPoolExecutor(32) as clients:
        answers = [a for part in clients.map(send, [requests[i::32] for i in range(32)]) for a in part]
    assert len(answers) == 2000
    assert [r.status_code for _, r in answers if r.status_code != 200] == []
    for texts, response in answers:
        _assert_same(response.json()["results"], [expected[t] for t in texts])
    batches = _metric(server, "paddle_ft_batch_size_texts_count") - before
    assert batches < 2000  # concurrent requests shared predictor calls


def _metric(server, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("body, headers, status, message", [
    (b'{"texts": ["ok"', {"content-type": "application/json"}, 422, "not valid JSON"),
    (b'{"texts": "one text"}', {"content-type": "application/json"}, 422, "valid list"),
    (b'{"texts": [1, 2]}', {"content-type": "application/json"}, 422, "valid string"),
    (b'{"texts": ["ok"], "top_k": "2"}', {"content-type": "application/json"}, 422, "valid integer"),
    (b'{"texts": ["ok"], "top_k": 3}', {"content-type": "application/json"}, 422, "top_k=3"),
    (b'{"text": ["ok"]}', {"content-type": "application/json"}, 422, "texts"),
    (b'{"texts": []}', {"content-type": "application/json"}, 422, "texts is empty"),
    (b'{"texts": ["ok", "  "]}', {"content-type": "application/json"}, 422, "texts[1] holds no character the model reads"),
    (b'{"texts": ["ok"]}', {"content-type": "text/plain"}, 422, "Content-Type: application/json"),
    (json.dumps({"texts": ["好"] * 17}).encode(), {"content-type": "application/json"}, 422, "limit is 16"),
    (b'{"texts": ["ok"], "top_k": 2.5}', {"content-type": "application/json"}, 422, "valid integer"),
    (b'{"texts": ["ok"], "top_k": true}', {"content-type": "application/json"}, 422, "valid integer"),
    (b'{"texts": ["ok"], "text_pairs": ["x"]}', {"content-type": "application/json"}, 422,
     "text_pairs is now called text_pair: send text_pair instead"),
    (json.dumps({"texts": ["好" * 3000] * 3}).encode(), {"content-type": "application/json"}, 413, "20000 bytes"),
    # 15 texts the model reads 64 tokens of (max_length 64) cost 960 > --max-request-tokens 900
    (json.dumps({"texts": ["好" * 100] * 15}).encode(), {"content-type": "application/json"}, 422,
     "the model would read about 960 tokens of this request; the limit is 900 (--max-request-tokens)"),
])
def test_every_bad_request_gets_its_status_and_a_json_message(server, body, headers, status, message):
    response = httpx.post(f"{server.url}/v1/classify", content=body, headers=headers)
    assert response.status_code == status
    assert message in response.json()["error"]["message"] and response.json()["error"]["status"] == status
    assert server.classify(["还好"]).status_code == 200  # and the server is fine afterwards


def test_a_streamed_body_over_the_limit_is_refused(server):
    def chunks():
        yield b'{"texts": ["'
        for _ in range(30):
            yield "好".encode() * 300
        yield b'"]}'

    response = httpx.post(f"{server.url}/v1/classify", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_pages_work_offline(server, page):
    """Every file the page loads comes from the server itself (FastAPI's own pages load Swagger UI from a CDN,
    which a firewalled server cannot reach): the page names no other host, and each file it names is served."""
    import re

    html = httpx.get(f"{server.url}{page}").text
    assert not re.search(r"https?://", html), re.findall(r"https?://[^\s'\"]+", html)
    assets = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"](/[^'"]+)['"]""", html)
    assert any(a.endswith(".js") for a in assets) and "/openapi.json" in assets
    for asset in assets:
        assert httpx.get(f"{server.url}{asset}").status_code == 200, asset


def test_health_readiness_metrics_and_openapi(server):
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/readyz").json() == {"status": "ready"}
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert "/v1/classify" in schema["paths"] and "ClassifyRequest" in schema["components"]["schemas"]
    server.classify(["好"])
    # a refused request of its own: under pytest-xdist the tests that send them may run in another worker
    assert server.classify("one text").status_code == 422
    metrics = httpx.get(f"{server.url}/metrics").text
    for name in ("paddle_ft_requests_total{status=\"200\"}", "paddle_ft_request_latency_seconds_bucket",
                 "paddle_ft_batch_size_texts_bucket", "paddle_ft_queue_depth_texts", "paddle_ft_model_ready 1.0",
                 "paddle_ft_requests_total{status=\"422\"}"):
        assert name in metrics


def test_a_full_queue_answers_503_with_retry_after(export_dir, tmp_path):
    server = Server(export_dir, tmp_path / "server.log", "--max-batch-size", "1", "--max-wait-ms", "0",
                    "--max-queue", "16", "--max-texts", "16")
    try:
        long_texts = _texts(16, seed=4, longest=60)
        with ThreadPoolExecutor(24) as clients:
            responses = list(clients.map(lambda _: server.classify(long_texts), range(48)))
        codes = [r.status_code for r in responses]
        assert set(codes) == {200, 503}, codes
        busy = next(r for r in responses if r.status_code == 503)
        assert busy.headers["retry-after"] == "1" and "server busy" in busy.json()["error"]["message"]
        assert server.classify(["好"]).status_code == 200
    finally:
        assert server.stop() == 0


def test_sigterm_finishes_in_flight_requests_then_exits_0(export_dir, tmp_path):
    server = Server(export_dir, tmp_path / "server.log", "--max-batch-size", "4", "--max-texts", "64",
                    "--max-queue", "4096")
    texts = _texts(64, seed=5, longest=60)
    with ThreadPoolExecutor(16) as clients:
        pending = [clients.submit(server.classify, texts) for _ in range(16)]
        time.sleep(0.5)  # the requests are in (64 texts x 16 at batch 4 take seconds on one thread)
        server.process.send_signal(signal.SIGTERM)
        codes = [f.result().status_code for f in pending]
    assert codes == [200] * 16
    assert server.process.wait(timeout=60) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/healthz", timeout=2)
    # issue 63: the server logged nothing on SIGTERM
    said = (tmp_path / "server.log").read_text(encoding="utf-8").splitlines()
    assert "SIGTERM: draining the requests in flight (up to 30 s), then stopping" in said and said[-1] == "stopped"


def test_an_idle_server_stops_at_once_on_sigterm(export_dir, tmp_path):
    """Issue 63: an idle server took 10-30 s to exit."""
    server = Server(export_dir, tmp_path / "server.log")
    assert server.classify(["好"]).status_code == 200  # a client came and went: its connection is closed
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    assert time.monotonic() - started < 3


def test_a_wrong_model_dir_is_a_one_line_error(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "serve.py"), "--export", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().startswith("error:") and len(done.stderr.strip().splitlines()) == 1


def test_classifier_one_line_api(export_dir, predictor):
    import paddle_ft
    from paddle_ft.errors import UserError

    classify = paddle_ft.Classifier(export_dir, cpu_threads=1)
    one = classify("好好好")
    assert one == predictor.predict(["好好好"])[0].as_dict()  # the one answer format
    assert set(one) == {"label", "score", "probabilities", "truncated", "windows"}
    many = classify(["好", "差差", "质量"], top_k=2, batch_size=2)
    assert len(many) == 3 and all(len(r["top_k"]) == 2 and r["top_k"][0]["score"] >= r["top_k"][1]["score"]
                                  for r in many)
    assert abs(sum(x["score"] for x in many[0]["top_k"]) - 1) < 1e-5
    assert many[0]["top_k"][0]["label"] == many[0]["label"]
    long = "差" * 10 + "好" * 100  # over max_length 64 (62 texts tokens): head keeps the 差, tail only 好
    head, tail = classify(long), paddle_ft.Classifier(export_dir, truncation="tail", cpu_threads=1)(long)
    assert head["truncated"] is True and tail["truncated"] is True
    same_as_head, same_as_tail = classify("差" * 10 + "好" * 52), classify("好" * 62)
    assert same_as_head["truncated"] is False and same_as_tail["truncated"] is False
    assert (head["label"], tail["label"]) == (same_as_head["label"], same_as_tail["label"])
    assert abs(head["score"] - same_as_head["score"]) < 1e-6 and abs(tail["score"] - same_as_tail["score"]) < 1e-6
    assert abs(head["score"] - tail["score"]) > 1e-6
    assert classify([]) == []
    with pytest.raises(UserError, match="batch_size"):
        classify("好", batch_size=0)
    with pytest.raises(UserError, match="top_k"):
        classify("好", top_k=3)
    with pytest.raises(UserError, match="a list of either"):
        classify([1])


def test_the_container_entrypoint_serves_outside_docker(export_dir, tmp_path):
    import os

    port = str(free_port())
    env = {**os.environ, "EXPORT_DIR": str(export_dir), "PORT": port, "HOST": "127.0.0.1", "DEVICE": "cpu",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen([str(ROOT / "docker" / "entrypoint.sh"), "--threads", "1"], env=env,
                               stdout=(tmp_path / "log").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, tmp_path / "log")
        assert httpx.post(f"http://127.0.0.1:{port}/v1/classify", json={"texts": ["好"]}).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, (tmp_path / "log").read_text()
    missing = subprocess.run([str(ROOT / "docker" / "entrypoint.sh")], env={**env, "EXPORT_DIR": str(tmp_path / "no")},
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no export folder at" in missing.stderr


@pytest.mark.parametrize("body, headers, status, message", [
    (b'{"texts": ["\\ud800"]}', {}, 422, "texts[0] holds a lone surrogate"),
    (b'{"texts": ["ok", "\\udfff x"]}', {}, 422, "texts[1] holds a lone surrogate"),
    (b'{"texts": ' + b"[" * 5000 + b"]" * 5000 + b"}", {}, 422, "not JSON that can be read"),
    (b'{"texts": ["ok"], "top_k": ' + b"7" * 5000 + b"}", {}, 422, "not JSON that can be read"),
    (b'{"texts": ["\xff\xfe"]}', {}, 422, "not JSON that can be read"),
    ('{"texts": ["好"]}'.encode("gbk"), {"content-type": "application/json; charset=gbk"}, 422, ""),
])
def test_hostile_bodies_get_422_in_the_documented_shape(server, body, headers, status, message):
    response = httpx.post(f"{server.url}/v1/classify", content=body,
                          headers={"content-type": "application/json", **headers})
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and response.json()["error"]["status"] == status
    assert message in response.json()["error"]["message"]


@pytest.mark.parametrize("method, path, status", [("GET", "/nope", 404), ("GET", "/v1/classify", 405),
                                                  ("DELETE", "/healthz", 405)])
def test_unknown_paths_and_methods_use_the_error_shape_too(server, method, path, status):
    response = httpx.request(method, f"{server.url}{path}")
    assert response.status_code == status
    assert response.json() == {"error": {"status": status, "message": response.json()["error"]["message"]}}


def test_a_bad_text_never_fails_the_requests_batched_with_it(server, predictor):
    pool = _texts(40, seed=7)
    expected = dict(zip(pool, (p.as_dict() for p in predictor.predict(pool))))

    def send(i):
        texts = [pool[i % 40], "\ud800"] if i % 3 == 0 else [pool[i % 40]]
        body = json.dumps({"texts": texts}).encode()  # json.dumps escapes the surrogate as \ud800
        return texts, httpx.post(f"{server.url}/v1/classify", content=body,
                                 headers={"content-type": "application/json"}, timeout=60)

    with ThreadPoolExecutor(16) as clients:
        answers = list(clients.map(send, range(300)))
    for texts, response in answers:
        if len(texts) == 2:
            assert response.status_code == 422
        else:
            assert response.status_code == 200
            _assert_same(response.json()["results"], [expected[texts[0]]])


def test_slow_clients_are_disconnected(export_dir, tmp_path):
    import socket

    server = Server(export_dir, tmp_path / "server.log", "--read-timeout", "1")
    try:
        slow = []
        for _ in range(20):  # slowloris: a request head that never ends
            connection = socket.create_connection(("127.0.0.1", server.port))
            connection.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\n")
            slow.append(connection)
        body = socket.create_connection(("127.0.0.1", server.port))  # a body that never completes
        body.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"texts\"")
        started = time.monotonic()
        for connection in slow:
            connection.settimeout(10)
            while True:  # keep dribbling header bytes until the server hangs up
                try:
                    connection.sendall(b"X")
                    if connection.recv(1024, socket.MSG_DONTWAIT) == b"":
                        break
                except BlockingIOError:
                    time.sleep(0.1)
                except OSError:
                    break
        assert time.monotonic() - started < 8
        body.settimeout(10)
        answer = b""
        while chunk := body.recv(4096):  # the server closes the connection after its answer
            answer += chunk
        answer = answer.decode()
        assert answer.startswith("HTTP/1.1 408") and '"status":408' in answer
        assert server.classify(["好"]).status_code == 200  # well-behaved clients are served meanwhile
    finally:
        assert server.stop() == 0


def test_serving_on_a_gpu_without_cuda_is_one_line(export_dir):
    import paddle

    if paddle.is_compiled_with_cuda():
        pytest.skip("this paddle has CUDA")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "serve.py"), "--export", str(export_dir),
                           "--device", "gpu", "--precision", "fp16"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: device 'gpu' asked for, but this paddle build has no CUDA: install paddlepaddle-gpu or use --device cpu"]
