"""The map in docs/architecture.md, held: imports run one way, the inference side loads no training code, and every
artifact's file names are spelt in its owner only."""
import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("code_map", ROOT / "tools" / "code_map.py")
code_map = importlib.util.module_from_spec(spec)
spec.loader.exec_module(code_map)

# what the inference side (and the server over it) may use: the shared helpers, the tokenizer, the export
# folder's owner and its metadata; never the config, the data readers, the engine or the model-building code
INFERENCE_MAY_USE = {"paddle_ft", "paddle_ft.errors", "paddle_ft.arguments", "paddle_ft.log", "paddle_ft.io",
                     "paddle_ft.runtime", "paddle_ft.text", "paddle_ft.data",
                     # MKL's vendor check, passed before paddle loads; the package's __init__ imports nothing
                     "paddle_ft.kernels", "paddle_ft.kernels.mkl_vendor",
                     # the tree of labels an answer is decoded on; the package's __init__ imports nothing
                     "paddle_ft.models", "paddle_ft.models.hierarchy",
                     "paddle_ft.tokenization", "paddle_ft.tokenization.fast", "paddle_ft.tokenization.readable",
                     "paddle_ft.tokenization.sentencepiece", "paddle_ft.tokenization.wordpiece",
                     "paddle_ft.artifacts", "paddle_ft.artifacts.meta", "paddle_ft.artifacts.export_folder",
                     "paddle_ft.artifacts.manifest", "paddle_ft.artifacts.model_card"}
# quantize checks accuracy on a labelled file, so it reads one (the only inference module that does)
READS_LABELLED_FILES = {"paddle_ft.inference.quantize": {"paddle_ft.data.readers"}}

# each artifact's file names, and the one module that spells them
OWNERS = {"results.json": "paddle_ft.artifacts.run", "metrics.jsonl": "paddle_ft.artifacts.run",
          "config.yaml": "paddle_ft.artifacts.run", "export.json": "paddle_ft.artifacts.export_folder",
          "model.json": "paddle_ft.artifacts.export_folder", "model.pdmodel": "paddle_ft.artifacts.export_folder",
          "model.pdiparams": "paddle_ft.artifacts.export_folder", "model.onnx": "paddle_ft.artifacts.export_folder",
          "label_map.json": "paddle_ft.data.labels", "paddle_ft.json": "paddle_ft.artifacts.meta",
          "MODEL_CARD.md": "paddle_ft.artifacts.model_card", "model_state.pdparams": "paddle_ft.models.convert",
          "manifest.json": "paddle_ft.artifacts.manifest", "checksums.json": "paddle_ft.engine.checkpoint",
          "shards.json": "paddle_ft.workflows.predict_ray"}


def test_imports_run_one_way_through_the_layers():
    layer = code_map.layer_of
    trees = code_map.modules()
    wrong = [f"{name} imports {target}" for name, tree in trees.items() if name != "paddle_ft"  # lazy public names
             for target in code_map.imports_of(name, tree, set(trees)) if target != "paddle_ft"
             and layer(target) > layer(name)]
    assert wrong == []


def test_the_inference_side_imports_no_training_code_even_lazily():
    trees = code_map.modules()
    wrong = [f"{name} imports {target}" for name, tree in trees.items()
             if name.startswith(("paddle_ft.inference", "paddle_ft.serve"))
             for target in code_map.imports_of(name, tree, set(trees))
             if not target.startswith(("paddle_ft.inference", "paddle_ft.serve")) and target not in
             INFERENCE_MAY_USE | READS_LABELLED_FILES.get(name, set())]
    assert wrong == []


@pytest.mark.slow  # a fresh interpreter
def test_loading_the_inference_side_and_the_server_loads_no_training_module():
    code = ("import sys, paddle_ft.inference, paddle_ft.inference.predictor, paddle_ft.inference.classifier, "
            "paddle_ft.inference.backends, paddle_ft.inference.tensorrt, paddle_ft.serve.main, paddle_ft.serve.app; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('paddle_ft'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=ROOT).stdout.split())
    assert {"paddle_ft.inference.predictor", "paddle_ft.serve.app"} <= loaded  # the check sees what it checks
    outside = {m for m in loaded if not m.startswith(("paddle_ft.inference", "paddle_ft.serve"))}
    assert outside <= INFERENCE_MAY_USE, outside - INFERENCE_MAY_USE
    assert not {"paddle_ft.config", "paddle_ft.data.readers", "paddle_ft.workflows.build", "paddle_ft.engine",
                "paddle_ft.models.networks", "paddle_ft.kernels.fused"} & loaded


def test_each_artifact_file_name_is_spelt_in_its_owner_only():
    spelt = {}
    for name, tree in code_map.modules().items():
        for file in code_map.file_names_in(tree):
            spelt.setdefault(file, set()).add(name)
    assert set(OWNERS) == set(code_map.ARTIFACT_FILES)
    assert {file: modules for file, modules in spelt.items() if modules != {OWNERS[file]}} == {}
    assert set(spelt) == set(OWNERS)  # every owner does spell its names: the scan sees them


def test_every_folder_of_the_package_is_one_setup_py_installs():
    from setuptools import find_packages

    installed = set(find_packages(str(ROOT), include=["paddle_ft", "paddle_ft.*"]))
    folders = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "paddle_ft").rglob("*.py")}
    assert folders - installed == set()  # a folder without __init__.py imports from a checkout, not when installed


def test_no_command_imports_another_and_only_the_command_line_imports_commands():
    """Issue 62: the work lives in workflows/, which commands and paddle_ft.train() share; a command module only
    declares flags (its own, and the shared ones of commands.flags) and maps a workflow's result to lines and an exit
    code."""
    trees = code_map.modules()
    known = set(trees)
    edges = {name: code_map.imports_of(name, tree, known) for name, tree in trees.items()}
    shared = {"paddle_ft.commands", "paddle_ft.commands.flags"}
    between_commands = [f"{name} imports {target}" for name, targets in edges.items()
                        if name.startswith("paddle_ft.commands.") for target in targets
                        if target.startswith("paddle_ft.commands") and target not in shared]
    assert between_commands == []
    outside = [f"{name} imports {target}" for name, targets in edges.items()
               if not name.startswith("paddle_ft.commands") and name != "paddle_ft.cli"
               for target in targets if target.startswith("paddle_ft.commands")]
    assert outside == []


def test_no_import_cycle_between_modules():
    trees = code_map.modules()
    known = set(trees)
    edges = {name: code_map.imports_of(name, tree, known) for name, tree in trees.items()}
    assert code_map.cycles(code_map.modules_only(edges, known)) == []
    assert code_map.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # it sees one


def test_the_commands_and_workflows_pass_typed_objects_not_long_argument_lists():
    """Issue 62: a command or workflow function of 8 parameters or more takes a typed request instead (init's
    InitRequest, select-texts' Selection), and commands/ stays the thin part."""
    trees = code_map.modules()
    wide = [(count, name) for module, tree in trees.items()
            if module.startswith(("paddle_ft.commands", "paddle_ft.workflows"))
            for count, name in code_map.parameter_counts(tree, module) if count >= code_map.WIDE]
    assert wide == []
    lines = sum(code_map.line_count(path) for path in (ROOT / "paddle_ft" / "commands").glob("*.py"))
    assert lines <= 1300, f"commands/ holds {lines} lines: the work belongs in workflows/"
