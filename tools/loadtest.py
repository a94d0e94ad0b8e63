"""Load-test the HTTP service on loopback: requests/s and p50/p99 latency at several concurrencies,
with dynamic batching on and off, side by side in one run.

    python tools/loadtest.py --model-dir out/demo/export [--requests 400] [--seconds 60]

It starts the server itself twice on 127.0.0.1 (batching on: --max-batch-size 32; off: 1), sends
single-text requests from the demo test split, and stops each level after --requests requests or
--seconds seconds, whichever comes first. Nothing leaves the machine.
"""
import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import httpx  # noqa: E402

from paddle_ft.serve.process import ServerProcess  # noqa: E402

FALLBACK_TEXTS = ["这个服务太差了，再也不来了", "质量很好，物流也快，非常满意", "一般般吧", "房间很干净，早餐丰富",
                  "客服态度恶劣，退款拖了一个月", "性价比高，推荐购买"]


def read_texts(path: Path) -> list[str]:
    if not path.is_file():
        return FALLBACK_TEXTS
    lines = path.read_text(encoding="utf-8").splitlines()[1:]  # header: text<TAB>label
    return [line.split("\t")[0] for line in lines if line.strip()] or FALLBACK_TEXTS


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="a folder written by export")
    parser.add_argument("--texts", default="data/demo/test.tsv", help="TSV whose first column is the text")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--requests", type=int, default=400, help="requests per level (upper bound)")
    parser.add_argument("--seconds", type=float, default=60, help="time per level (upper bound)")
    parser.add_argument("--threads", type=int, default=None, help="server predictor threads")
    args = parser.parse_args()

    texts, _ = read_texts(Path(args.texts))
    levels = [int(c) for c in args.concurrency.split(",")]
    extra = ["--threads", str(args.threads)] if args.threads else []
    rows = []
    with tempfile.TemporaryDirectory() as logs:
        for name, options in (("on", ["--max-batch-size", "32", "--max-wait-ms", "5"]),
                              ("off", ["--max-batch-size", "1", "--max-wait-ms", "0"])):
            server = ServerProcess(args.model_dir, Path(logs) / f"batching-{name}.log", *options, *extra)
            try:
                run_level(server.url, texts, 4, 40, 30)  # warm-up
                for concurrency in levels:
                    rows.append((name, concurrency, run_level(server.url, texts, concurrency, args.requests,
                                                              args.seconds)))
            finally:
                server.stop()
    print("| batching | concurrency | requests/s | p50 ms | p99 ms | requests | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, concurrency, r in rows:
        print(f"| {name} | {concurrency} | {r['requests_per_s']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['requests']} | {r['errors']} |")
    return 1 if any(r["errors"] for _, _, r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
