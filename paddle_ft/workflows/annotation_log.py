"""The folder `serve --label-studio DIR` owns (artifacts.ownership kind "label-studio"): what people annotated in
Label Studio, as its webhooks told it, and each retraining on those annotations (workflows.retraining).

    annotations.jsonl   one event a line, appended and flushed as the webhook arrives: an annotation of a task
                        ({"task", "annotation", "at", "text", "text_pair", "labels"}; labels null: skipped or
                        emptied) or the deletion of annotations ({"deleted": [ids]})
    round-N/            the Nth retraining: train.jsonl (the model's training rows and the annotations),
                        retrain.yaml (its config), run/ (the training run), export/ (its export, served once it has
                        loaded and passed its checks), retrain.log (what the child processes printed), round.json
                        (how it ended)

A task's labels are those of its most recent annotation that was not deleted: the rows a retraining adds are one per
annotated task."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.data.text_files import json_lines
from paddle_ft.io import open_own_file

ANNOTATIONS = "annotations.jsonl"
ROUND_PREFIX = "round-"


@dataclass(frozen=True)
class Annotated:
    """A task's text and the labels of its latest annotation."""
    task: int
    text: str
    text_pair: str | None
    labels: tuple[str, ...]


class AnnotationLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def record_annotation(self, task: int, annotation: int, at: str, text: str, text_pair: str | None,
                          labels: tuple[str, ...] | None) -> None:
        self._append({"task": task, "annotation": annotation, "at": at, "text": text, "text_pair": text_pair,
                      "labels": None if labels is None else list(labels)})

    def record_deletion(self, annotations: list[int]) -> None:
        self._append({"deleted": annotations})

    def _append(self, event: dict) -> None:
        with open_own_file(self.path / ANNOTATIONS, "a") as out:
            out.write(json.dumps(event, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())  # a webhook answered 201 is on disk

    def annotated(self) -> list[Annotated]:
        """Each task's latest annotation with labels, in the order the tasks were first annotated."""
        path = self.path / ANNOTATIONS
        if not path.is_file():
            return []
        events = [event for _, event in json_lines(path, "it is written by paddle_ft serve --label-studio only")]
        deleted = {annotation for event in events for annotation in event.get("deleted", ())}
        by_task: dict[int, list[dict]] = {}  # a deleted annotation gives the task back its previous one
        for event in events:
            if "task" in event and event["annotation"] not in deleted:
                by_task.setdefault(event["task"], []).append(event)
        return [Annotated(task, e["text"], e["text_pair"], tuple(e["labels"]))
                for task, e in ((task, kept[-1]) for task, kept in by_task.items()) if e["labels"]]

    def rounds(self) -> list[Path]:
        numbered = [(int(p.name[len(ROUND_PREFIX):]), p) for p in self.path.glob(f"{ROUND_PREFIX}*")
                    if p.name[len(ROUND_PREFIX):].isdigit()]
        return [p for _, p in sorted(numbered)]

    def new_round(self) -> Path:
        rounds = self.rounds()
        number = int(rounds[-1].name[len(ROUND_PREFIX):]) + 1 if rounds else 1
        folder = self.path / f"{ROUND_PREFIX}{number}"
        folder.mkdir()
        return folder
