"""A config's splits checked before training (the `audit` command's work): duplicates, leakage between splits,
conflicting labels, near-empty texts, lengths against max_length, labels per split and [UNK] tokens, written as
audit.json and a page. The command prints the table, and with --strict fails on leakage or conflicts."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.analysis.audit import NO_PROBLEMS, audit, table
from paddle_ft.analysis.report import table_html, write_page
from paddle_ft.artifacts.ownership import owned_folder
from paddle_ft.config import load_config
from paddle_ft.io import write_text_atomically
from paddle_ft.workflows.build import build_tokenizer, read_dataset, resolve_backbone


@dataclass(frozen=True)
class Audit:
    """What `audit_config` found and wrote."""

    report: dict
    """Every finding (analysis.audit.audit): its "problems" are what --strict fails on."""
    files: tuple[Path, ...]
    """audit.json and audit.html."""

    @property
    def table(self) -> str:
        return table(self.report)


def audit_config(config_path: str, overrides: list[str], output: str | None = None) -> Audit:
    """The audit of the config's splits, written to the folder `output` (default: OUTPUT_DIR/audit)."""
    config = load_config(config_path, overrides)
    with owned_folder(Path(output) if output else Path(config.output_dir) / "audit", "audit", "--output") as folder:
        return _audit(config_path, config, folder)


def _audit(config_path: str, config, folder: Path) -> Audit:
    dataset = read_dataset(config.data, config.task)
    tokenizer = build_tokenizer(resolve_backbone(config.model))
    report = audit(dataset.examples, tokenizer, config.data.max_length)
    write_text_atomically(folder / "audit.json", json.dumps(report, ensure_ascii=False, indent=2))
    problems = "".join(f"<li>{html.escape(line)}</li>" for line in report["problems"] or [NO_PROBLEMS])
    page = write_page(folder / "audit.html", f"audit of {config_path}",
                      ["<h2>Splits</h2>", table_html(table(report)), f"<h2>Problems</h2><ul>{problems}</ul>",
                       '<p>Every finding with its first rows: <a href="audit.json">audit.json</a>.</p>'])
    return Audit(report, (folder / "audit.json", page))
