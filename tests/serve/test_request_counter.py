"""The service's request metrics (paddle_ft.serve.app.RequestCounter), on an ASGI app of a few lines: what the
server's /metrics shows is tested end to end in test_serve.py."""
import asyncio

from paddle_ft.serve.app import RequestCounter
from paddle_ft.serve.metrics import Metrics


def answering(status: int):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
    return app


def sample(metrics: Metrics, name: str, **labels) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_classify_answers_are_counted_by_status_and_timed_and_other_paths_are_not():
    metrics, sent = Metrics(), []

    async def send(message):
        sent.append(message)

    for status, path in [(200, "/v1/classify"), (422, "/v1/classify"), (200, "/v1/classify"), (200, "/healthz")]:
        asyncio.run(RequestCounter(answering(status), metrics)({"type": "http", "path": path}, None, send))
    assert sample(metrics, "paddle_ft_requests_total", status="200") == 2
    assert sample(metrics, "paddle_ft_requests_total", status="422") == 1
    assert sample(metrics, "paddle_ft_request_latency_seconds_count") == 3
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"] * 4  # passed on unchanged
    assert [m["status"] for m in sent if "status" in m] == [200, 422, 200, 200]
