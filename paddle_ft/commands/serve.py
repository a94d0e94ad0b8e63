"""`serve`: an export over HTTP with dynamic batching (`paddle_ft/serve/` does the work)."""
from __future__ import annotations

from paddle_ft.commands.flags import Files, export_argument, inference_arguments
from paddle_ft.serve.options import add_arguments as serving_arguments

FILES = Files()


def add_arguments(parser) -> None:
    inference_arguments(export_argument(parser))
    serving_arguments(parser)


def main(args) -> int:
    from paddle_ft.serve.main import main as serve

    return serve(args)
