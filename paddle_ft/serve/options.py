"""The `serve` command's options (no heavy imports: the CLI builds every parser at start-up)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_batch_size: int = 32
    """Texts per predictor call; 1 turns dynamic batching off."""
    max_wait_ms: float = 0.0
    """How long the first request of a batch waits for others; 0 = never: a batch is what is queued when the
    predictor is free (a lone request runs at once, batches form only under load)."""
    max_texts: int = 64
    """Texts per request."""
    max_body_bytes: int = 1 << 20
    max_queue_texts: int = 1024
    """Texts waiting for a batch; beyond it requests get 503."""
    max_batch_tokens: int = 4096
    """Tokens per predictor call (about a character each)."""
    max_request_share: int = 256
    """Tokens of one request in one predictor call: a larger request goes in chunks that share batches with the
    others, so it never holds the model for long (serve/batcher.py)."""
    max_request_tokens: int = 524_288
    """Tokens one request may cost (64 texts of 8,192); more: 422."""
    retry_after_s: int = 1
    read_timeout_s: float = 10.0
    """Seconds a client gets to send its request head, and again its body; slower connections are closed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The serving flags; the export and the predictor's flags are the CLI's, shared with predict."""
    from paddle_ft.arguments import non_negative_float, port, positive_int

    d = Limits()
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface (containers)")
    parser.add_argument("--port", type=port, default=8080)
    parser.add_argument("--max-batch-size", type=positive_int, default=d.max_batch_size,
                        help="texts per predictor call; 1 turns dynamic batching off")
    parser.add_argument("--max-wait-ms", type=non_negative_float, default=d.max_wait_ms,
                        help="how long a batch waits for more requests; 0 (default): never, a batch is what "
                             "queued while the predictor was busy")
    parser.add_argument("--max-texts", type=positive_int, default=d.max_texts, help="texts per request (more: 422)")
    parser.add_argument("--max-batch-tokens", type=positive_int, default=d.max_batch_tokens,
                        help="tokens per predictor call, about one a character (default 4096)")
    parser.add_argument("--max-request-share", type=positive_int, default=d.max_request_share,
                        help="tokens of one request in one predictor call (default 256): a larger request goes in "
                             "chunks that share batches with the others, so it never holds the model for long")
    parser.add_argument("--max-request-tokens", type=positive_int, default=d.max_request_tokens,
                        help="tokens one request may cost (more: 422; default 524288)")
    parser.add_argument("--max-body-bytes", type=positive_int, default=d.max_body_bytes, help="request body size (more: 413)")
    parser.add_argument("--max-queue", type=positive_int, default=d.max_queue_texts,
                        help="texts waiting for a batch (more: 503 with Retry-After)")
    parser.add_argument("--read-timeout", type=non_negative_float, default=d.read_timeout_s,
                        help="seconds a client gets to send its request head, and again its body (slower: closed)")
    parser.add_argument("--graceful-timeout", type=non_negative_float, default=30.0,
                        help="seconds in-flight requests get to finish after SIGTERM")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    backend = parser.add_argument_group("Label Studio ML backend (docs/labelling.md)")
    backend.add_argument("--label-studio", metavar="DIR",
                         help="also answer Label Studio's ML backend protocol (/health, /setup, /predict, /webhook): "
                              "pre-annotations, and retraining on the annotations, kept in DIR")
    backend.add_argument("--retrain-every", type=positive_int, default=50, metavar="N",
                         help="retrain once N more tasks are annotated (default 50; Label Studio's Start Training "
                              "retrains at once)")
    backend.add_argument("--retrain-config", metavar="FILE",
                         help="the config to retrain with (default: the one the served model was trained with, from "
                              "its manifest)")
