"""The flags several commands share, declared once so that each means one thing everywhere: `--model` a trained model
folder (OUT/best), `--export` an export folder, `--output` a folder a command writes and `--output-file` a file,
`-c/--config` and `-o` a recipe and its overrides, and the
predictor's flags (`--device`, `--gpu-id`, `--threads`, `--precision`, `--tensorrt`, `--backend`, `--truncation`)
wherever a predictor runs (tests/cli/test_cli.py::test_every_flag_has_one_meaning_across_the_commands)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from paddle_ft.arguments import non_negative_int, positive_int
from paddle_ft.inference.backends import BACKENDS
from paddle_ft.text import TRUNCATIONS


@dataclass(frozen=True)
class Files:
    """What a command reads of the user's and writes: each a flag (`--input`), a positional argument's name (`file`)
    or a config key set with `-o` (`data.train`). Every command module declares its `FILES`;
    tests/cli/test_every_command.py runs hostile files at each of them (a command without a declaration fails it)."""

    reads: tuple[str, ...] = ()
    """Files of the user's data: tables, texts, label lists, annotation exports, search spaces."""
    writes: tuple[str, ...] = ()
    """Files and folders it creates or replaces."""


TRAINING_DATA = ("data.train", "data.dev", "data.test")  # what a config-driven command reads of the user's


def overwrite_argument(parser: argparse.ArgumentParser, option: str) -> argparse.ArgumentParser:
    """`--overwrite`: the one way to let a command replace a file that exists at `option` (and the files named after
    it); without it an existing file is refused (`io.check_new_files`), as it may be the user's."""
    parser.add_argument("--overwrite", action="store_true", help=f"replace the {option} file (and the files named "
                                                                 "after it) if they exist; without it they are refused")
    return parser


def config_arguments(parser: argparse.ArgumentParser, example: str) -> argparse.ArgumentParser:
    parser.add_argument("-c", "--config", required=True, help=f"the YAML recipe, e.g. {example}")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (dotted path, YAML value); repeatable")
    return parser


def model_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--model", required=True, help="a model folder written by training (OUT/best)")
    return parser


def export_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--export", required=True, help="an export folder (written by export or quantize)")
    renamed(parser, "--model-dir", "--export", "DIR")
    return parser


def output_file_argument(parser: argparse.ArgumentParser, what: str) -> argparse.ArgumentParser:
    """`--output-file FILE`, the file a command writes; `--output`, which names a folder everywhere, refused."""
    parser.add_argument("--output-file", required=True, metavar="FILE", help=what)
    renamed(parser, "--output", "--output-file", "FILE")
    return parser


def inference_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What the predictor runs on and how it reads a long text: the same flags for predict and serve."""
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--gpu-id", type=non_negative_int, default=0, help="GPU device id with --device gpu")
    parser.add_argument("--threads", type=positive_int, help="CPU threads of the predictor (default: all usable "
                                                             "cores)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="bf16: oneDNN on CPUs with AVX512-BF16/AMX; fp16: GPU")
    parser.add_argument("--tensorrt", action="store_true", help="GPU: run the graph with TensorRT")
    parser.add_argument("--backend", choices=BACKENDS, help="the engine: paddle (Paddle Inference), onnxruntime "
                                                           "(fp32 CPU) or auto (default: fp32 on CPU, each call on "
                                                           "the engine measured fastest at its size at load)")
    parser.add_argument("--truncation", choices=TRUNCATIONS, help="how a text longer than the model's max_length "
                                                                  "is cut (default: as training cut it)")
    return parser


def renamed(parser: argparse.ArgumentParser, old: str, new: str, metavar: str) -> None:
    """`old`, a flag this command once took, refused in one line that names `new` (never a silent alias)."""
    class Refuse(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(f"{old} is now {new}: give {new} {metavar}")

    parser.add_argument(old, nargs="?", action=Refuse, help=argparse.SUPPRESS)
