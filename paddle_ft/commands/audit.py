"""`audit`: check a config's splits before training: duplicates, leakage between splits, conflicting labels,
near-empty texts, lengths against max_length, labels per split and [UNK] tokens. Prints a table and writes
audit.json; with `strict`, leakage or conflicts fail the command (exit 1), so that a pipeline can gate on it."""
from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from paddle_ft.analysis.audit import NO_PROBLEMS, audit, table
from paddle_ft.analysis.report import table_html, write_page
from paddle_ft.workflows.build import build_tokenizer, read_dataset, resolve_backbone
from paddle_ft.commands.flags import config_arguments
from paddle_ft.config import load_config
from paddle_ft.io import write_text_atomically
from paddle_ft.artifacts.ownership import owned_folder


def run(config_path: str, overrides: list[str], output: str | None, strict: bool) -> int:
    config = load_config(config_path, overrides)
    with owned_folder(Path(output) if output else Path(config.output_dir) / "audit", "audit", "--output") as folder:
        return _audit(config_path, config, folder, strict)


def _audit(config_path: str, config, folder: Path, strict: bool) -> int:
    dataset = read_dataset(config.data, config.task)
    tokenizer = build_tokenizer(resolve_backbone(config.model))
    report = audit(dataset.examples, tokenizer, config.data.max_length)
    write_text_atomically(folder / "audit.json", json.dumps(report, ensure_ascii=False, indent=2))
    print(table(report), end="")
    problems = "".join(f"<li>{html.escape(line)}</li>" for line in report["problems"] or [NO_PROBLEMS])
    page = write_page(folder / "audit.html", f"audit of {config_path}",
                      ["<h2>Splits</h2>", table_html(table(report)), f"<h2>Problems</h2><ul>{problems}</ul>",
                       '<p>Every finding with its first rows: <a href="audit.json">audit.json</a>.</p>'])
    print(f"wrote {folder / 'audit.json'} and {page}")
    if strict and report["problems"]:
        print(f"error: audit --strict: {'; '.join(report['problems'])}", file=sys.stderr)
        return 1
    return 0


# the command line: `python -m paddle_ft audit` (registered in paddle_ft/cli.py)
def add_arguments(parser) -> None:
    config_arguments(parser, "configs/demo.yaml")
    parser.add_argument("--output", help="folder for audit.json (default: OUTPUT_DIR/audit)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on leakage between splits or conflicting labels")


def main(args) -> int:
    return run(args.config, args.override, args.output, args.strict)
