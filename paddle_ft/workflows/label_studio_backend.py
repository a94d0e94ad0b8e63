"""The work behind `serve --label-studio DIR` (serve/label_studio.py answers the protocol): the annotations Label
Studio's webhooks bring, recorded in DIR (workflows.annotation_log), the retraining they start (workflows.retraining),
and the served model's answers as Label Studio results."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from paddle_ft.artifacts.ownership import owned_folder
from paddle_ft.data.annotation import PAIR_KEY, LabelSpace
from paddle_ft.data.label_studio_export import answer_labels
from paddle_ft.errors import UserError
from paddle_ft.serve.label_studio import as_list, task_text
from paddle_ft.workflows.annotation_log import AnnotationLog
from paddle_ft.workflows.retraining import Recipe, Retrainer, recipe_of


class LabelStudioBackend:
    """What the protocol's routes ask of the backend (serve/label_studio.add_routes): answers as results, annotations
    recorded, retraining started."""

    def __init__(self, log: AnnotationLog, retrainer: Retrainer, space: LabelSpace):
        self.log, self.retrainer, self.space = log, retrainer, space

    @property
    def labels(self) -> tuple[str, ...]:
        return self.space.names

    @property
    def path_separator(self) -> str:
        """How the config's taxonomy paths are joined into the model's labels."""
        return self.space.path_separator or "/"

    def result(self, labels: tuple[str, ...]) -> dict:
        """A Label Studio result choosing `labels` (a tree's as a taxonomy path)."""
        return self.space.result(labels)

    def record(self, body: dict, from_name: str, data_key: str) -> int:
        """The annotations of a webhook's body (an annotation or a list, and its task), recorded; how many. An
        annotation that is not a classification's is left out with a line in the log."""
        task = body.get("task") if isinstance(body.get("task"), dict) else {}
        recorded = 0
        for annotation in as_list(body.get("annotation")):
            if not isinstance(annotation, dict) or not isinstance(annotation.get("id"), int):
                continue
            task_id = annotation.get("task") if isinstance(annotation.get("task"), int) else task.get("id")
            text, pair = task_text(task, data_key), task_text(task, PAIR_KEY)
            if not isinstance(task_id, int) or text is None:
                continue
            try:
                labels = None if annotation.get("was_cancelled") else answer_labels(
                    f"task {task_id}", annotation.get("result") or [], from_name, self.path_separator)
            except UserError as exc:
                print(f"error: Label Studio webhook: {exc}; left out", file=sys.stderr, flush=True)
                continue
            self.log.record_annotation(task_id, annotation["id"], str(annotation.get("updated_at") or ""), text, pair,
                                       labels)
            recorded += 1
        if recorded:
            self.retrainer.annotated()
        return recorded

    def forget(self, annotations: list[int]) -> None:
        self.log.record_deletion(annotations)

    def start_training(self) -> bool:
        return self.retrainer.start()

    def state(self) -> dict:
        return {"retraining": self.retrainer.running, "last_retraining": self.retrainer.last}

    async def stop(self) -> None:
        await self.retrainer.stop()


@contextlib.contextmanager
def label_studio_backend(export_dir: Path, folder: str, every: int, config_file: str | None) -> Iterator:
    """The maker of the backend for the server (`make(slot)`), with `folder` held (locked) for the block. The files
    a retraining reads are checked first: one line, before anything listens or is written."""
    recipe: Recipe = recipe_of(export_dir, config_file)
    recipe.check()
    with owned_folder(folder, "label-studio", "--label-studio", "another serve is its Label Studio backend; give this "
                      "one another folder") as path:
        log = AnnotationLog(path)

        def make(slot) -> LabelStudioBackend:
            retrainer = Retrainer(log, recipe, every, slot.reload, lambda line: print(line, file=sys.stderr,
                                                                                      flush=True))
            return LabelStudioBackend(log, retrainer, recipe.space)

        print(f"Label Studio ML backend: annotations and retrainings in {path} (retraining every {every} annotated "
              "tasks)", file=sys.stderr, flush=True)
        yield make
