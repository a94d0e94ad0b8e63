"""Load-test the HTTP service on loopback: requests/s and p50/p99 latency at several concurrencies,
with dynamic batching adaptive (the default), with a 5 ms wait and off, side by side in one run.

    python tools/loadtest.py --export out/demo/export [--requests 400] [--seconds 60]

It starts the server itself on 127.0.0.1 for each mode, sends single-text requests from the demo test split,
and stops each level after --requests requests or --seconds seconds, whichever comes first (see
tools/bench/serving.py; `python tools/bench.py --serve` runs it too). Nothing leaves the machine.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.serving import fairness_markdown, fairness_test, load_test, markdown  # noqa: E402

FALLBACK_TEXTS = ["这个服务太差了，再也不来了", "质量很好，物流也快，非常满意", "一般般吧", "房间很干净，早餐丰富",
                  "客服态度恶劣，退款拖了一个月", "性价比高，推荐购买"]


def read_texts(path: Path) -> list[str]:
    if not path.is_file():
        return FALLBACK_TEXTS
    lines = path.read_text(encoding="utf-8").splitlines()[1:]  # header: text<TAB>label
    return [line.split("\t")[0] for line in lines if line.strip()] or FALLBACK_TEXTS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="a folder written by export")
    parser.add_argument("--texts", default="data/demo/test.tsv", help="TSV whose first column is the text")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--requests", type=int, default=400, help="requests per level (upper bound)")
    parser.add_argument("--seconds", type=float, default=60, help="time per level (upper bound)")
    parser.add_argument("--threads", type=int, default=None, help="server predictor threads")
    parser.add_argument("--fairness", action="store_true", help="instead: one-text p99 idle and while 64 x "
                        "4,000-character requests run, and requests/s at 32, with the token budget and without")
    args = parser.parse_args()
    if args.fairness:
        rows = fairness_test(Path(args.export), read_texts(Path(args.texts)), args.requests, args.seconds,
                             args.threads)
        print(fairness_markdown(rows), end="")
        return 1 if any(r["errors"] for r in rows) else 0

    rows = load_test(Path(args.export), read_texts(Path(args.texts)), [int(c) for c in args.concurrency.split(",")],
                     args.requests, args.seconds, args.threads)
    print(markdown(rows), end="")
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
