"""`verify`: is a folder still what paddle_ft wrote (workflows.verification)? Each difference is one `error:` line
and exit 1."""
from __future__ import annotations

import sys

from paddle_ft.commands.flags import Files

FILES = Files(reads=("--data",))


def add_arguments(parser) -> None:
    parser.add_argument("folder", metavar="DIR", help="an export folder (written by export or quantize) or a "
                                                      "training run's best/")
    parser.add_argument("--data", metavar="FILE", help="one of the labelled files the model was trained or scored on: "
                        "checked against its recorded sha256, and the model scored on it again")


def main(args) -> int:
    from paddle_ft.workflows.verification import verify_folder

    verification = verify_folder(args.folder, args.data)
    for line in verification.problems:
        print(f"error: verify: {line}", file=sys.stderr)
    if not verification.ok:
        return 1
    print(f"verified {args.folder}: {'; '.join(verification.held)}")
    return 0
