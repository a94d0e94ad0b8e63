"""The package's shape in numbers, from its syntax trees: modules at the root, import edges between paddle_ft
modules, which modules name each artifact's files, the longest functions, the widest signatures, the largest modules
and the lines kept outside the library (tools/).

    python tools/code_map.py            # a summary
    python tools/code_map.py --edges    # and every import edge

docs/architecture.md quotes it; tests/test_architecture.py holds the rules it describes.
"""
from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "paddle_ft"
# the file names of the artifacts: a module that spells one as a whole string literal reads or writes it
ARTIFACT_FILES = ("results.json", "metrics.jsonl", "config.yaml", "export.json", "model.json", "model.pdmodel",
                  "model.pdiparams", "model.onnx", "label_map.json", "paddle_ft.json", "MODEL_CARD.md",
                  "model_state.pdparams", "manifest.json", "checksums.json", "shards.json")
# the pipeline's layers, lowest first: a module may import from its own layer and those below it. A name is a
# module or package under paddle_ft; a module takes the layer of the longest name that holds it (kernels.mkl_vendor
# is set up before paddle is imported, so it sits with the base; models.hierarchy decodes answers for the inference
# side too). inference sits below export because export proves itself with the Predictor (the parity check).
LAYERS = [("errors", "arguments", "log", "io", "runtime", "kernels.mkl_vendor"),
          ("text", "tokenization", "models.hierarchy"),
          ("config",), ("data",), ("models",), ("artifacts",), ("engine", "kernels"), ("analysis",), ("inference",),
          ("export",), ("serve",), ("workflows",), ("commands",), ("cli", "api", "__main__")]
WIDE = 8  # parameters (self and cls aside) from which a signature counts as wide
LARGE = 400  # lines from which a module counts as large


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    """The index in LAYERS of a paddle_ft module (by the longest name in LAYERS that holds it)."""
    parts = module.split(".")[1:]
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        for i, names in enumerate(LAYERS):
            if name in names:
                return i
    raise KeyError(f"{module} is in no layer of tools/code_map.py's LAYERS")


def imports_of(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The paddle_ft modules `name` imports anywhere in its body (function-level imports too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:  # the package imports absolutely only
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles between modules: each strongly connected group of two or more (Tarjan), sorted."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(groups)


def _packages(known: set[str]) -> set[str]:
    return {m for m in known if any(other.startswith(m + ".") for other in known)}


def docstrings(tree: ast.Module) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef)))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr)}


def file_names_in(tree: ast.Module, files: tuple[str, ...] = ARTIFACT_FILES) -> set[str]:
    """The artifact file names `tree` spells as a whole string literal (prose in messages and docstrings aside)."""
    skip = docstrings(tree)
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in files and id(n) not in skip}


def functions(tree: ast.Module, name: str) -> list[tuple[int, str]]:
    return [(n.end_lineno - n.lineno + 1, f"{name}.{n.name}") for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def parameter_counts(tree: ast.Module, name: str) -> list[tuple[int, str]]:
    counts = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            counts.append((len([n for n in names if n not in ("self", "cls")]), f"{name}.{node.name}"))
    return counts


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def modules_only(edges: dict[str, set[str]], known: set[str]) -> dict[str, set[str]]:
    """The edges between modules, without those to a package's own __init__ (a module importing its package's
    name is how Python loads it, not a cycle of the code)."""
    packages = _packages(known)
    return {name: {t for t in targets if t not in packages} for name, targets in edges.items() if name not in packages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every import edge")
    args = parser.parse_args()
    trees = modules()
    known = set(trees)
    edges = {name: imports_of(name, tree, known) for name, tree in trees.items()}
    root = sorted(n for n in known if n.count(".") == 1 and n not in _packages(known))
    names = defaultdict(list)
    for name, tree in trees.items():
        for file in file_names_in(tree):
            names[file].append(name)
    sizes = sorted((size for name, tree in trees.items() for size in functions(tree, name)), reverse=True)
    lines = sum(line_count(p) for p in PACKAGE.rglob("*.py"))
    print(f"{len(known)} modules, {lines} lines; {len(root)} at the package root: {' '.join(root)}")
    print(f"{sum(map(len, edges.values()))} import edges between paddle_ft modules; "
          f"{len(cycles(modules_only(edges, known)))} import cycles between modules")
    for room in ("commands", "workflows"):
        files = sorted((PACKAGE / room).glob("*.py"))
        print(f"paddle_ft/{room}/: {len(files)} modules, {sum(map(line_count, files))} lines")
    for file in ARTIFACT_FILES:
        print(f"{file!r} spelt in {len(names[file])}: {' '.join(sorted(names[file]))}")
    median = sorted(size for size, _ in sizes)[len(sizes) // 2]
    print(f"{len(sizes)} functions, median {median} lines; longest: "
          + ", ".join(f"{name} {size}" for size, name in sizes[:6]))
    wide = sorted((c for name, tree in trees.items() for c in parameter_counts(tree, name) if c[0] >= WIDE),
                  reverse=True)
    print(f"{len(wide)} functions with {WIDE} or more parameters: " + ", ".join(f"{n} {c}" for c, n in wide))
    large = sorted(((line_count(p), module_name(p)) for p in PACKAGE.rglob("*.py") if line_count(p) > LARGE),
                   reverse=True)
    print(f"{len(large)} modules over {LARGE} lines: " + ", ".join(f"{n} {c}" for c, n in large))
    print(f"paddle_ft/cli.py: {line_count(PACKAGE / 'cli.py')} lines; outside the library, tools/: "
          f"{sum(line_count(p) for p in (ROOT / 'tools').rglob('*.py'))} lines")
    if args.edges:
        for name in sorted(edges):
            for target in sorted(edges[name]):
                print(f"{name} -> {target}")


if __name__ == "__main__":
    main()
