"""`audit`: a config's splits checked before training (workflows.audit); the table on standard output, and with
--strict exit 1 on leakage between splits or conflicting labels, so that a pipeline can gate on it."""
from __future__ import annotations

import sys

from paddle_ft.commands.flags import TRAINING_DATA, Files, config_arguments

FILES = Files(reads=TRAINING_DATA, writes=("--output",))


def add_arguments(parser) -> None:
    config_arguments(parser, "configs/demo.yaml")
    parser.add_argument("--output", help="folder for audit.json (default: OUTPUT_DIR/audit)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on leakage between splits or conflicting labels")


def main(args) -> int:
    from paddle_ft.workflows.audit import audit_config

    audit = audit_config(args.config, args.override, args.output)
    print(audit.table, end="")
    print(f"wrote {' and '.join(map(str, audit.files))}")
    problems = audit.report["problems"]
    if args.strict and problems:
        print(f"error: audit --strict: {'; '.join(problems)}", file=sys.stderr)
        return 1
    return 0
