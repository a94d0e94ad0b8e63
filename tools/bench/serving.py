"""The HTTP service under load, on loopback: requests/s and p50/p99 latency at several concurrencies, with
dynamic batching as served by default (adaptive: no wait), with a 5 ms wait, and off, and the same export's ONNX graph
served as a user would without paddle_ft (plain_onnx_server.py), side by side in one run.
It starts each server itself, one at a time, on 127.0.0.1; nothing leaves the machine."""
from __future__ import annotations

import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from paddle_ft.io import open_own_file
from bench.server_process import ServerProcess, free_port, wait_until_ready

BATCHING = (("adaptive (default)", ["--max-batch-size", "32"]),
            ("wait 5 ms", ["--max-batch-size", "32", "--max-wait-ms", "5"]),
            ("off", ["--max-batch-size", "1"]))
PLAIN_ONNX = "plain ONNX Runtime (FastAPI, no paddle_ft)"  # the peer's row; None as options: plain_onnx_server.py


def load_test(export_dir: Path, texts: list[str], levels: list[int], requests: int, seconds: float,
              threads: int | None = None, rounds: int = 1) -> list[dict]:
    """One row per batching mode (and the plain ONNX Runtime server) and concurrency: each level stops after
    `requests` requests or `seconds`. With `rounds`, the whole test runs that many times (every server started
    afresh, the modes taking turns) and a row's figures are its median round's, each round's requests/s under
    "rounds": one run of a shared machine is no figure (0.86-1.14x against the plain server over seven)."""
    runs = []
    for _ in range(rounds):
        runs.append([{"batching": name, "concurrency": concurrency,
                      **run_level(url, texts, concurrency, requests, seconds)}
                     for name, url in _warm_servers(export_dir, texts, BATCHING + ((PLAIN_ONNX, None),), threads)
                     for concurrency in levels])
    return [_median_round([run[i] for run in runs]) for i in range(len(runs[0]))]


def _median_round(same: list[dict]) -> dict:
    """One mode and concurrency over the rounds: the median round by requests/s (of an even number the slower
    middle one), the requests and errors of all rounds, each round's requests/s."""
    middle = sorted(same, key=lambda row: row["requests_per_s"])[(len(same) - 1) // 2]
    return {**middle, "requests": sum(row["requests"] for row in same), "errors": sum(row["errors"] for row in same),
            "rounds": [row["requests_per_s"] for row in same]}


def _warm_servers(export_dir: Path, texts: list[str], modes, threads: int | None):
    """(name, url) of a warmed-up server per (name, options) of `modes` (`paddle_ft serve` with those options; the
    plain ONNX Runtime server where they are None), one at a time, each stopped once the caller moves on."""
    extra = ["--threads", str(threads)] if threads else []
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise (paddlenlp logs at INFO)
    with tempfile.TemporaryDirectory() as logs:
        for number, (name, options) in enumerate(modes):
            log = Path(logs) / f"{number}.log"
            server = PlainOnnxServer(export_dir, log, extra) if options is None else \
                ServerProcess(export_dir, log, *options, *extra)
            try:
                run_level(server.url, texts, 4, 40, 30)  # warm-up
                yield name, server.url
            finally:
                server.stop()


class PlainOnnxServer:
    """plain_onnx_server.py on a free loopback port, ready, stopped like a `ServerProcess`."""

    def __init__(self, export_dir: Path, log: Path, extra: list[str]):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open_own_file(log) as out:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("plain_onnx_server.py")), "--export", str(export_dir),
                 "--port", str(port), *extra], stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until_ready(self.url, self.process, log)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout=60)


def markdown(rows: list[dict]) -> str:
    lines = ["| batching | concurrency | requests/s | p50 ms | p99 ms | requests | errors |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['batching']} | {r['concurrency']} | {r['requests_per_s']:.1f} | {r['p50_ms']:.1f} | "
              f"{r['p99_ms']:.1f} | {r['requests']} | {r['errors']} |" for r in rows]
    return "\n".join(lines) + "\n"


def run_level(url: str, texts: list[str], concurrency: int, requests: int, seconds: float) -> dict:
    """`concurrency` clients in a closed loop until `requests` were sent or `seconds` passed."""
    latencies, errors, lock = [], 0, threading.Lock()
    sent = iter(range(requests))
    deadline = time.monotonic() + seconds

    def client(worker: int) -> None:
        nonlocal errors
        with httpx.Client(timeout=30) as http:
            for i in sent:
                if time.monotonic() > deadline:
                    return
                started = time.perf_counter()
                try:
                    ok = http.post(f"{url}/v1/classify", json={"texts": [texts[(i * 7 + worker) % len(texts)]]}) \
                        .status_code == 200
                except httpx.HTTPError:
                    ok = False
                elapsed = time.perf_counter() - started
                with lock:
                    if ok:
                        latencies.append(elapsed)
                    else:
                        errors += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(client, range(concurrency)))
    wall = time.perf_counter() - started
    latencies.sort()
    return {"requests_per_s": len(latencies) / wall, "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "requests": len(latencies), "errors": errors}


BUDGETS = (("a request's share 256 tokens (default)", []),
           ("no token limits", ["--max-batch-tokens", str(10 ** 9), "--max-request-share", str(10 ** 9)]))
LARGE_REQUEST = (64, 4000)  # texts, characters each: the largest request the default limits let in


def fairness_test(export_dir: Path, texts: list[str], requests: int, seconds: float,
                  threads: int | None = None) -> list[dict]:
    """Per batching budget: the p99 of one-text requests (4 clients) when idle and while large requests
    (64 x 4,000 characters) are sent back to back, and requests/s at concurrency 32 without them."""
    count, length = LARGE_REQUEST
    large = {"texts": [(texts[i % len(texts)] * (length // len(texts[i % len(texts)]) + 1))[:length]
                       for i in range(count)]}
    rows = []
    for name, url in _warm_servers(export_dir, texts, BUDGETS, threads):
        idle = run_level(url, texts, 4, requests, seconds)
        stop, large_latencies = threading.Event(), []

        def send_large() -> None:
            with httpx.Client(timeout=120) as http:
                while not stop.is_set():
                    started = time.perf_counter()
                    http.post(f"{url}/v1/classify", json=large).raise_for_status()
                    large_latencies.append(time.perf_counter() - started)

        sender = threading.Thread(target=send_large)
        sender.start()
        time.sleep(0.5)
        loaded = run_level(url, texts, 4, requests, seconds)
        stop.set()
        sender.join()
        busy = run_level(url, texts, 32, requests, seconds)
        rows.append({"budget": name, "idle_p99_ms": idle["p99_ms"], "with_large_p99_ms": loaded["p99_ms"],
                     "ratio": loaded["p99_ms"] / idle["p99_ms"], "large_requests": len(large_latencies),
                     "large_mean_s": statistics.mean(large_latencies) if large_latencies else None,
                     "requests_per_s_at_32": busy["requests_per_s"],
                     "errors": idle["errors"] + loaded["errors"] + busy["errors"]})
    return rows


def fairness_markdown(rows: list[dict]) -> str:
    lines = ["| token limits | one-text p99 idle ms | with 64 x 4,000-char requests ms | ratio | "
             "large requests (mean s) | requests/s at 32 | errors |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['budget']} | {r['idle_p99_ms']:.1f} | {r['with_large_p99_ms']:.1f} | {r['ratio']:.1f}x | "
              f"{r['large_requests']} ({r['large_mean_s'] or 0:.2f}) | {r['requests_per_s_at_32']:.1f} | "
              f"{r['errors']} |" for r in rows]
    return "\n".join(lines) + "\n"
