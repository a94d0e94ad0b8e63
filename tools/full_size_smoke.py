"""The toolkit at bert-base-chinese's size on this machine (12 x 768, vocabulary 21,128, random weights): train 20
steps, export with parity, predict at batch 1, serve a request; prints peak memory, seconds per step, export size
and latency, and writes OUTPUT/full_size.json.

    python tools/full_size_smoke.py [--output out/full-size-smoke] [--steps 20] [--batch-size 8]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.full_size import main  # noqa: E402  (the commands it runs set the process up)
from paddle_ft.errors import UserError  # noqa: E402

if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
