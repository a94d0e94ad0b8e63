"""paddle_ft against its peers, side by side in one run (`make bench`; tools/bench/run.py, docs/performance.md):

    python tools/bench.py [--output out/bench] [--quick] ...
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.run import add_arguments, main  # noqa: E402  (tools/bench/, beside this script)
from paddle_ft.arguments import ArgumentParser  # noqa: E402
from paddle_ft.cli import configured, execute  # noqa: E402

if __name__ == "__main__":
    parser = ArgumentParser(prog="tools/bench.py", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(run=main)
    args = parser.parse_args()
    sys.exit(execute(args) if configured() else 2)
