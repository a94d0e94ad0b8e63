"""`serve`: an export over HTTP with dynamic batching (`paddle_ft/serve/` does the work); with --label-studio also
Label Studio's ML backend (workflows.label_studio_backend)."""
from __future__ import annotations

from paddle_ft.commands.flags import Files, export_argument, inference_arguments
from paddle_ft.serve.options import add_arguments as serving_arguments

FILES = Files(reads=("--retrain-config",), writes=("--label-studio",))


def add_arguments(parser) -> None:
    inference_arguments(export_argument(parser))
    serving_arguments(parser)


def main(args) -> int:
    from pathlib import Path

    from paddle_ft.errors import UserError
    from paddle_ft.serve.label_studio import basic_auth_credentials
    from paddle_ft.serve.main import main as serve

    if not args.label_studio:
        if args.retrain_config:
            raise UserError("--retrain-config is the recipe of the Label Studio backend's retraining: give "
                            "--label-studio DIR too, or leave it out")
        return serve(args)
    from paddle_ft.workflows.label_studio_backend import label_studio_backend

    basic_auth_credentials()  # a malformed PADDLE_FT_BASIC_AUTH is one line now
    with label_studio_backend(Path(args.export), args.label_studio, args.retrain_every, args.retrain_config) as make:
        return serve(args, make)
