"""Prometheus metrics of the service, in a registry of its own (several apps can live in one process)."""
from __future__ import annotations

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               disable_created_metrics, generate_latest)

disable_created_metrics()  # no *_created series: scrapers do not need them

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("paddle_ft_requests", "POST /v1/classify requests by HTTP status", ["status"], registry=r)
        self.errors = Counter("paddle_ft_prediction_errors", "Requests whose batch raised in the predictor", registry=r)
        self.texts = Counter("paddle_ft_texts", "Texts classified", registry=r)
        self.latency = Histogram("paddle_ft_request_latency_seconds", "Time from request to response",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch_sizes = Histogram("paddle_ft_batch_size_texts", "Texts per predictor call", buckets=BATCH_BUCKETS,
                                     registry=r)
        self.queue_depth = Gauge("paddle_ft_queue_depth_texts", "Texts waiting for a batch", registry=r)
        self.ready = Gauge("paddle_ft_model_ready", "1 once the model is loaded and warmed up", registry=r)
        self.reloads = Counter("paddle_ft_model_reloads", "SIGHUP reloads by result (swapped, refused)", ["result"],
                               registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
