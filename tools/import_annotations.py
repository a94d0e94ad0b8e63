"""Thin wrapper over `python -m paddle_ft import-annotations`; see docs/commands.md."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from paddle_ft.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["import-annotations", *sys.argv[1:]]))
