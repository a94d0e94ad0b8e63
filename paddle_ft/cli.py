"""`python -m paddle_ft COMMAND`: the commands below; `tools/*.py` wrap `main`.

Each command's module declares its flags (`add_arguments(parser)`) and runs it (`main(args)`); this module only
registers them, and imports a command's module (and with it paddle) only once the process is set up for it.
A `UserError` (bad config, bad data, bad path) is printed as one `error:` line and exits 2.
"""
from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from typing import NamedTuple

from paddle_ft import runtime
from paddle_ft.arguments import ArgumentParser
from paddle_ft.errors import UserError
from paddle_ft.io import describe_os_error


class Command(NamedTuple):
    name: str
    """Its module in paddle_ft.commands and its tools/ wrapper are the name with "_" for "-"."""
    help: str

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")


COMMANDS = (
    Command("init", "write a training config from your own labelled files"),
    Command("train", "fine-tune a classifier from a YAML config"),
    Command("pretrain", "pretrain an encoder on unlabeled text (masked LM)"),
    Command("distill", "train a smaller student on a trained teacher's answers"),
    Command("audit", "check a config's data: duplicates, leakage, conflicting labels, ..."),
    Command("cv", "K-fold cross-validation of a config (mean ± std of every metric)"),
    Command("label-issues", "find probably mislabelled rows of train and dev (out-of-fold confident learning)"),
    Command("sweep", "hyperparameter search with Optuna (resumable; see docs/analysis.md)"),
    Command("report", "write OUT/report.html for a finished training run"),
    Command("export-tasks", "texts with the model's answers as pre-annotations, as Label Studio or doccano tasks"),
    Command("select-texts", "the unlabelled texts worth labelling next (active learning), as export-tasks writes them"),
    Command("import-annotations", "a Label Studio or doccano export as rows train reads (or a label-issues review "
                                  "answered there as data.corrections)"),
    Command("eval", "score a trained model on a labelled file"),
    Command("explain", "why a trained model answers: token attributions (integrated gradients) and the nearest "
                       "training texts"),
    Command("convert", "convert a Hugging Face checkpoint folder to a PaddleNLP one"),
    Command("trim-vocab", "a copy of a backbone keeping only the vocabulary pieces your texts use (SentencePiece: "
                          "multilingual-e5, XLM-R, bge-m3)"),
    Command("add-class", "a prototype-head model with one class more, without retraining: its prototype from a few "
                         "examples and/or a description"),
    Command("remove-class", "a prototype-head model without one of its classes"),
    Command("export", "export a trained model to a static graph for Paddle Inference"),
    Command("quantize", "quantize an export to int8 for ONNX Runtime, checked on labelled texts"),
    Command("verify", "check that a saved model or an export is still what was written (every file, the engines, "
                      "the score on a recorded data file)"),
    Command("predict", "classify texts with an exported model"),
    Command("serve", "serve an exported model over HTTP with dynamic batching"),
)
# commands of an earlier version, refused in one line that names the new one (never a silent alias)
RENAMED = {"select": "select-texts", "import": "import-annotations"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not configured():
        return 2
    if argv[:1] and argv[0] in RENAMED:
        print(f"error: the command {argv[0]} is now {RENAMED[argv[0]]}: python -m paddle_ft "
              f"{shlex.join([RENAMED[argv[0]], *argv[1:]])}", file=sys.stderr)
        return 2
    args = parser(argv[:1]).parse_args(argv)
    try:
        return execute(args)
    except KeyboardInterrupt:  # also a second Ctrl-C that lands while an error below is being reported
        print("interrupted", file=sys.stderr)
        return 130


def configured() -> bool:
    """runtime.configure() (environment and library noise, before a command's module imports paddle), a mistake in
    the environment it reads (PADDLE_FT_MKL_AVX512=yes) printed as one `error:` line: False then."""
    try:
        runtime.configure()
    except UserError as exc:
        _report(exc)
        return False
    return True


def parser(declared: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line: every command, with the flags of those named in `declared` (None: of all)."""
    top = ArgumentParser(prog="paddle_ft", description="Fine-tune, export and serve BERT-family text classifiers "
                                                       "on PaddlePaddle. Every command takes --help.")
    commands = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        if declared is None or command.name in declared:
            module = importlib.import_module(f"paddle_ft.commands.{command.module}")
            module.add_arguments(sub)
            sub.set_defaults(run=module.main)
    # the bench is a measuring tool of the checkout (tools/bench/), not part of the installed library
    # (no option prefix, so that whatever options follow reach the message below instead of argparse's)
    bench = commands.add_parser("bench", help="benchmark against PaddleNLP, HF and ONNX Runtime: run from a checkout",
                                prefix_chars="\0", add_help=False)
    bench.add_argument("options", nargs="*")
    bench.set_defaults(run=_bench)
    return top


def execute(args) -> int:
    """Runs `args.run(args)`, a user's mistake as one `error:` line and exit 2 (also for tools/ scripts' parsers)."""
    from paddle_ft.engine.interrupt import TrainingInterrupted

    try:
        return args.run(args)
    except TrainingInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except UserError as exc:
        _report(exc)
        return 2
    except ImportError:  # a package beside paddle_ft moved past a pin (huggingface_hub, ...): one line, the fix
        problem = runtime.broken_pin()
        if problem is None:
            raise
        print(f"error: {problem}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk or a read-only folder met while writing; anything else is a bug
        problem = describe_os_error(exc)
        if problem is None:
            raise
        print(f"error: {problem}", file=sys.stderr)
        return 2


def _report(exc: UserError) -> None:
    for line in exc.lines():
        print(f"error: {line}", file=sys.stderr)


def _bench(args) -> int:
    raise UserError("the bench runs from a checkout of paddle_ft, not from the installed package: "
                    "python tools/bench.py [--output DIR] (or make bench); see docs/performance.md")


if __name__ == "__main__":
    sys.exit(main())
