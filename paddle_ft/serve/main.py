"""`python -m paddle_ft serve --export OUT/export [--host 127.0.0.1 --port 8080 ...]`.

SIGTERM or Ctrl-C: uvicorn stops accepting connections, lets in-flight requests finish (up to
--graceful-timeout seconds), the batcher drains, and the process exits 0.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
from pathlib import Path
from typing import Callable

import uvicorn

from paddle_ft.artifacts.export_folder import program_file, read_export_info
from paddle_ft.errors import UserError
from paddle_ft.inference.backends import choose_backend
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor, check_device, check_tensorrt
from paddle_ft.serve.app import create_app
from paddle_ft.serve.options import Limits
from paddle_ft.serve.protocol import protocol_with_head_timeout


def main(args: argparse.Namespace, label_studio: Callable | None = None) -> int:
    """Serve `args.export`; `label_studio(slot)`, where given, makes the Label Studio ML backend whose routes the server
    adds (commands/serve.py builds it from workflows.label_studio_backend)."""
    export_dir = Path(args.export)
    # a wrong folder or device is a one-line error now, not a /readyz 503 forever
    program = program_file(export_dir)
    device, precision = args.device, args.precision
    if read_export_info(export_dir).quantization is not None and device == "gpu":
        # the image serves with DEVICE=gpu; an int8 export would never load there and /readyz would stay 503
        print(f"{export_dir} is an int8 export, which runs on ONNX Runtime on the CPU only: serving it on the CPU",
              file=sys.stderr, flush=True)
        device, precision = "cpu", "fp32"
    check_device(device, precision)
    if args.tensorrt:
        check_tensorrt(program, device)
    if args.max_queue < args.max_texts:
        raise UserError(f"--max-queue {args.max_queue} is below --max-texts {args.max_texts}: a full request could "
                        "never be queued; raise --max-queue")
    check_listen_address(args.host, args.port)
    limits = Limits(args.max_batch_size, args.max_wait_ms, args.max_texts, args.max_body_bytes, args.max_queue,
                    max_batch_tokens=args.max_batch_tokens, max_request_share=args.max_request_share,
                    max_request_tokens=args.max_request_tokens,
                    read_timeout_s=args.read_timeout)
    backend = choose_backend(args.backend or ("paddle" if args.tensorrt else None), export_dir, device, precision)
    options = PredictOptions(device, args.threads, precision, backend, gpu_id=args.gpu_id, use_tensorrt=args.tensorrt,
                             batch_size=limits.max_batch_size, truncation=args.truncation)
    app = create_app(lambda folder=export_dir: Predictor(folder, options), limits, options.truncation, export_dir,
                     label_studio)
    _run(app, args, limits, backend)
    return 0


def _run(app, args: argparse.Namespace, limits: Limits, backend: str) -> None:
    print(f"serving {args.export} on http://{args.host}:{args.port} (POST /v1/classify; {backend}, max batch "
          f"{limits.max_batch_size} texts or {limits.max_batch_tokens} tokens, wait {limits.max_wait_ms:g} ms)",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=args.access_log,
                            timeout_graceful_shutdown=args.graceful_timeout,
                            http=protocol_with_head_timeout(limits.read_timeout_s))
    DrainingServer(config).run()


def check_listen_address(host: str, port: int) -> None:
    """Bind (and release) the address before loading the model, as uvicorn will: a port in use or a host this
    machine does not have is one line, not uvicorn's log and exit 3."""
    try:
        families = {info[0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: not an address of this machine ({exc.strerror}); give an IP address such "
                        "as 127.0.0.1 or 0.0.0.0") from None
    with socket.socket(families.pop(), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port, or stop what "
                            "uses it") from None


class DrainingServer(uvicorn.Server):
    """uvicorn's server, except that after a SIGTERM/SIGINT has drained it the process exits 0:
    uvicorn re-raises the signal once it has shut down, so the process would end 'killed by SIGTERM'
    even though nothing was lost."""

    @contextlib.contextmanager
    def capture_signals(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.handle_exit)  # first: drain; a second one: stop now (uvicorn's rule)
        yield
        print("stopped", file=sys.stderr, flush=True)

    def handle_exit(self, sig: int, frame) -> None:
        """The first signal says it drains (the log of a stopping server says why it stops), then uvicorn's rule."""
        if not self.should_exit:
            print(f"{signal.Signals(sig).name}: draining the requests in flight (up to "
                  f"{self.config.timeout_graceful_shutdown:g} s), then stopping", file=sys.stderr, flush=True)
        super().handle_exit(sig, frame)
