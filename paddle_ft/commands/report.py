"""`report`: the training report of a finished run, OUT/report.html (workflows.run_report)."""
from __future__ import annotations

from paddle_ft.commands.flags import Files

FILES = Files(writes=("run_dir",))


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="OUT", help="the output_dir of a finished run")


def main(args) -> int:
    from paddle_ft.workflows.run_report import report_run

    print(f"wrote {report_run(args.run_dir)}")
    return 0
