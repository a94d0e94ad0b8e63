"""docs/config.md, generated from the config's own dataclasses and the docstring under each field.

    python tools/config_reference.py > docs/config.md

tests/test_config.py fails when docs/config.md differs from what this prints.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from paddle_ft import config as config_module  # noqa: E402

HEADER = """# Config reference

Every key of a recipe, its default and what it does: generated from `paddle_ft/config.py` (the docstring under each
field) by `python tools/config_reference.py > docs/config.md`; a test keeps the two equal. Any key can be set from
the command line with `-o KEY=VALUE` (the value read as YAML) or from Python with `paddle_ft.train(config,
{"KEY": value})`. `python -m paddle_ft init` writes a recipe for your own files.
"""


def docstrings() -> dict[str, dict[str, str]]:
    """{dataclass name: {field: the string literal after it}}."""
    found = {}
    for node in ast.parse(inspect.getsource(config_module)).body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = {
                field.target.id: " ".join(after.value.value.split())
                for field, after in zip(node.body, node.body[1:])
                if isinstance(field, ast.AnnAssign) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}
    return found


def sections(cls, prefix: str = "") -> list[tuple[str, type, list]]:
    """(dotted prefix, dataclass, its leaf fields) for `cls` and every dataclass nested in it, in field order."""
    leaves, nested = [], []
    for field in dataclasses.fields(cls):
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        if dataclasses.is_dataclass(default):
            nested += sections(type(default), f"{prefix}{field.name}.")
        else:
            leaves.append((field, default))
    return [(prefix, cls, leaves), *nested]


def shown(value) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip().removesuffix("\n...")


def markdown() -> str:
    docs = docstrings()
    lines = [HEADER]
    for prefix, cls, leaves in sections(config_module.Config):
        if not leaves:
            continue
        lines += [f"## {prefix.rstrip('.') or 'top level'}", "", "| key | default | what it does |", "|---|---|---|"]
        for field, default in leaves:
            doc = docs.get(cls.__name__, {}).get(field.name, "").replace("|", "\\|")
            lines.append(f"| `{prefix}{field.name}` | `{shown(default)}` | {doc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
