"""Retraining on what people annotate in Label Studio (`serve --label-studio DIR --retrain-every N`): the served
model's own recipe (the config its manifest records, or --retrain-config) trained again, in child processes, on its
training rows plus the annotations, then exported; the served model keeps answering until the new export has loaded
and passed the checks of a SIGHUP reload (its files against its manifest, its engines against each other), and a
new export that fails them is never served. One retraining at a time; annotations that arrive meanwhile start the
next one when it ends."""
from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

import yaml

from paddle_ft import runtime
from paddle_ft.artifacts.export_folder import read_export_info
from paddle_ft.artifacts.manifest import read_manifest
from paddle_ft.config import config_to_dict, load_config
from paddle_ft.data.annotation import LabelSpace
from paddle_ft.data.readers import Columns, format_of, read_examples, write_records
from paddle_ft.errors import UserError
from paddle_ft.io import open_own_file, write_text_atomically
from paddle_ft.workflows.annotation_log import Annotated, AnnotationLog

ROUND_INFO = "round.json"


@dataclass(frozen=True)
class Recipe:
    """How the served model was trained: its config (a dict, as the manifest records it) and what it answers."""
    config: dict
    space: LabelSpace

    @property
    def labels(self) -> tuple[str, ...]:
        return self.space.names

    @property
    def multi_label(self) -> bool:
        return self.space.multi_label

    def check(self) -> None:
        """The files a retraining reads are here (paths as the config gives them, from the working folder): one line
        naming the one missing, before the server starts, not at the first retraining."""
        data = self.config.get("data", {})
        for split in ("train", "dev", "test"):
            path = data.get(split)
            if path is not None and not Path(path).is_file():
                raise UserError(f"--label-studio: the served model's config names data.{split} {path}, which is not "
                                "here; start serve in the folder it was trained from, or give --retrain-config")

    @property
    def columns(self) -> Columns:
        data = self.config.get("data", {})
        return Columns(data.get("text_column", "text"), data.get("text_pair_column"), data.get("label_column", "label"),
                       data.get("label_delimiter", ",") if self.multi_label else None,
                       header=data.get("header", True))


def recipe_of(export_dir: Path, config_file: str | None) -> Recipe:
    """The recipe to retrain the export at `export_dir` with: `config_file` (--retrain-config), else the config its
    manifest records."""
    space = LabelSpace.of_model(read_export_info(export_dir).model)
    if config_file is not None:
        return Recipe(config_to_dict(load_config(config_file)), space)
    config = read_manifest(export_dir).get("config")
    if not isinstance(config, dict):
        raise UserError(f"--label-studio: {export_dir}'s manifest records no training config; give the config to "
                        "retrain with as --retrain-config FILE")
    return Recipe(config, space)


class Retrainer:
    """The retrainings of one backend folder: when to start one, and running it (`serve_export(folder)` is the
    server's reload of a new export: True once it serves it)."""

    def __init__(self, folder: AnnotationLog, recipe: Recipe, every: int,
                 serve_export: Callable[[Path], Awaitable[bool]], log: Callable[[str], None]):
        self.folder, self.recipe, self.every, self._serve_export, self._log = folder, recipe, every, serve_export, log
        done = [info for info in map(_round_info, folder.rounds()) if info is not None]
        self.last = done[-1] if done else None
        """The last retraining that ended: its round, annotations, result and the model it made."""
        self._trained_on = self.last["annotations"] if self.last else 0
        self._trained_answers: list | None = None  # what the last retraining of this process trained on
        self._running: asyncio.Task | None = None
        self._again = False
        self._child: asyncio.subprocess.Process | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._running is not None and not self._running.done()

    def annotated(self) -> None:
        """An annotation arrived: retrain once `every` more tasks are annotated than the last retraining saw."""
        annotated = self.folder.annotated()
        if len(annotated) - self._trained_on >= self.every:
            self.start(annotated)

    def start(self, annotated: list | None = None) -> bool:
        """Retrain now (Label Studio's "Start Training"), or once the retraining under way ends. False when no task
        is annotated, or none changed since the last retraining started (Label Studio's "Start model training on
        annotation submission" asks at every submission). `annotated`: the log's tasks, when the caller read them."""
        annotated = self.folder.annotated() if annotated is None else annotated
        if not annotated or annotated == self._trained_answers:  # the last retraining has these already
            return False
        if self.running:
            self._again = True
        else:
            self._running = asyncio.get_running_loop().create_task(self._rounds())
        return True

    async def stop(self) -> None:
        """The server stops: a retraining under way is ended (its child process gets SIGTERM: a training run saves
        where it was) and not served."""
        self._again, self._stopping = False, True
        if self._child is not None and self._child.returncode is None:
            self._child.terminate()
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)

    async def _rounds(self) -> None:
        while True:
            self._again = False
            try:
                await self._round()
            except Exception as exc:  # reported in the server's log; the served model keeps serving
                self._log(f"error: retraining failed: {type(exc).__name__}: {exc}")
            if not self._again:
                return

    async def _round(self) -> None:
        annotated = self.folder.annotated()
        self._trained_on, self._trained_answers = len(annotated), annotated
        folder = self.folder.new_round()
        self._log(f"retraining {folder.name} on {len(annotated)} annotated tasks (log: {folder / 'retrain.log'})")
        config = self._round_config(folder, annotated)
        steps = (["train", "-c", str(config)],
                 ["export", "--model", str(folder / "run" / "best"), "--output", str(folder / "export")])
        result, model = None, None
        for step in steps:
            code = await self._run([sys.executable, "-m", "paddle_ft", *step], folder / "retrain.log") \
                if not self._stopping else None
            if self._stopping:
                result = "stopped with the server"
                break
            if code != 0:
                result = f"{step[0]} exited with {code}; see {folder / 'retrain.log'}"
                break
        if result is None:
            served = await self._serve_export(folder / "export")
            result = "served" if served else ("the new export was refused (the server's log says why); the served "
                                              "model keeps serving")
            model = folder.name if served else None
        self.last = {"round": folder.name, "annotations": len(annotated), "result": result, "model": model}
        write_text_atomically(folder / ROUND_INFO, json.dumps(self.last, ensure_ascii=False) + "\n")
        self._log(f"retraining {folder.name}: {result}")

    def _round_config(self, folder: Path, annotated: list[Annotated]) -> Path:
        """The round's training file (the model's training rows, a text annotated since with its new labels, then the
        other annotations) and its config: the recipe with that file and the round's run folder."""
        columns = self.recipe.columns
        data = self.recipe.config.get("data", {})
        annotated = [a for a in annotated if self._fits(a)]
        new = {(a.text, a.text_pair) for a in annotated}
        held = []
        if data.get("train"):
            examples, _ = read_examples(data["train"], data.get("format") or format_of(data["train"], "tsv"), columns)
            held = [(e.text, e.text_pair, e.label_names) for e in examples if (e.text, e.text_pair) not in new]
        rows = held + [(a.text, a.text_pair, a.labels) for a in annotated]
        names = [columns.text, *([columns.text_pair] if columns.text_pair else []), columns.label]
        write_records(folder / "train.jsonl", "jsonl", names, [
            {columns.text: text, **({columns.text_pair: pair} if columns.text_pair else {}),
             columns.label: list(labels) if self.recipe.multi_label else labels[0]} for text, pair, labels in rows])
        config = {**self.recipe.config, "output_dir": str(folder / "run"),
                  "data": {**data, "train": str(folder / "train.jsonl"), "format": None}}
        path = folder / "retrain.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
        return path

    def _fits(self, annotated: Annotated) -> bool:
        """An annotation the recipe can train on: labels of the model, one unless it is multi-label."""
        unknown = [label for label in annotated.labels if label not in self.recipe.labels]
        if unknown or (len(annotated.labels) > 1 and not self.recipe.multi_label):
            why = f"the label {unknown[0]!r} is not one of the model's" if unknown else "a single-label model's text " \
                "has one label"
            self._log(f"retraining: task {annotated.task} left out: {why}")
            return False
        return True


    async def _run(self, command: list[str], log: Path) -> int:
        """A child process's exit code, its output appended to `log`."""
        with open_own_file(log, "a") as out:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            self._child = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                                                               stderr=asyncio.subprocess.STDOUT,
                                                               env=runtime.environment_as_given())
            return await self._child.wait()


def _round_info(folder: Path) -> dict | None:
    """How a round ended (its round.json); None for one that did not end, or whose file is damaged."""
    try:
        info = json.loads((folder / ROUND_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("annotations"), int) else None
