"""Prediction on Ray (the `predict --ray` command's work): many or large input files scored on a Ray cluster, written
as shards that a rerun does not score again.

The driver reads every input file with the readers `predict` uses (every row checked, a bad one named by its file
and line), cuts each file into shards of `--shard-rows` texts and hands the shards still to do to Ray Data as a
dataset; an actor pool scores them (`ShardScorer`: each actor loads the export once, with the predictor options of
`predict`) and writes each shard's predictions to OUT/shards/ (atomically: a shard file that exists is complete).
Every output row carries its source file and line. OUT/shards.json lists the shards; `--merge` writes
OUT/predictions.jsonl, every row in input order. What the shards were made from (the export's files, the inputs'
sha256, the settings that change an answer) is fingerprinted in OUT/predict-fingerprint.json: a rerun with anything
else is refused (`--restart` starts afresh).

The output folder must be one every node can write (a shared filesystem on a real cluster). Ray is imported here
only: `predict` without `--ray` never loads it."""
from __future__ import annotations

import glob
import json
import logging
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.analysis.fingerprint import check_same_work, read_work, write_work
from paddle_ft.artifacts.export_folder import read_export_info
from paddle_ft.artifacts.manifest import read_manifest
from paddle_ft.artifacts.ownership import clear, owned_folder
from paddle_ft.data.readers import read_texts
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.io import atomic_file, file_sha256, write_text_atomically
from paddle_ft.log import log
from paddle_ft.workflows.predict_files import SKIP_OPTION, record, say_skipped

FINGERPRINT, SHARD_LIST, MERGED, SHARDS = "predict-fingerprint.json", "shards.json", "predictions.jsonl", "shards"


@dataclass(frozen=True)
class Shard:
    name: str
    source: str
    texts: list[str]
    pairs: list[str] | None
    lines: list[int]


def input_files(patterns: list[str]) -> list[Path]:
    """The files `--input` names: paths or glob patterns, in the order given (a pattern's matches sorted)."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise UserError(f"--input {pattern} matches no file")
        for match in matches:
            if not Path(match).is_file():
                raise UserError(f"--input {match} does not exist")
            files.append(Path(match))
    return files


@dataclass(frozen=True)
class RayJob:
    """How the files are scored on the cluster."""

    address: str | None = None
    """The head's host:port, auto, or None: a local cluster started for the job."""
    shard_rows: int = 10000
    actors: int | None = None
    """Scoring actors (None: one per cpu_threads CPUs of the cluster)."""
    merge: bool = False
    """Also write every row in input order into one file."""
    restart: bool = False
    """Start afresh instead of resuming the shards already written."""


@dataclass(frozen=True)
class RayPrediction:
    """What a `predict_on_ray` run left in its output folder."""

    shards: int
    rows: int
    scored: int
    """Shards this run scored (the others were written by an earlier run)."""
    shard_list: Path
    merged: Path | None
    """Every row in input order, where the job asked for it."""


def predict_on_ray(export_dir: str, patterns: list[str], output: str, options: PredictOptions, job: RayJob,
                   on_bad_row: str = "error") -> RayPrediction:
    """Every text of the files `patterns` name scored on Ray into shards under the folder `output` (a rerun scores
    only the shards missing)."""
    export = Path(export_dir)
    meta = read_export_info(export).model
    files = input_files(patterns)
    if job.address not in (None, "auto"):
        check_reachable(job.address)
    with owned_folder(output, "predict", "--output") as root:
        if job.restart:
            clear(root)
        return _predict(export, meta, files, root, options, job, on_bad_row)


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A cluster address where nothing listens fails here, in one line: Ray itself would wait for it without end."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--ray {address}: give the head's host:port (its GCS port, 6379 unless set otherwise), or "
                        "auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UserError(f"--ray {address}: nothing answers there ({exc.strerror or 'no answer'} within "
                        f"{timeout_s:.0f} s); start the cluster (ray start --head) or give its head's address") from None


def _predict(export: Path, meta, files: list[Path], root: Path, options: PredictOptions, job: RayJob,
             on_bad_row: str) -> RayPrediction:
    work = work_of(export, files, options, job, on_bad_row)
    check_same_work(root, read_work(root / FINGERPRINT), work, "batch prediction")
    shards, skipped = _shards(files, meta, job.shard_rows, on_bad_row)
    write_work(root / FINGERPRINT, work)
    (root / SHARDS).mkdir(exist_ok=True)
    to_do = [s for s in shards if not (root / SHARDS / s.name).is_file()]
    log(f"predict --ray: {len(shards)} shards of {sum(len(s.texts) for s in shards)} texts; {len(shards) - len(to_do)} "
        f"already written, {len(to_do)} to score")
    started = time.perf_counter()
    if to_do:
        _score_on_ray(to_do, export, root / SHARDS, options, job)
    seconds = time.perf_counter() - started
    texts = sum(len(s.texts) for s in to_do)
    log(f"predict --ray: scored {len(to_do)} shards ({texts} texts) in {seconds:.1f} s"
        + (f", {texts / seconds:.0f} texts/s" if texts else ""))
    _write_shard_list(root, shards, len(to_do), skipped)
    if job.merge:
        _merge(root, shards)
    return RayPrediction(len(shards), sum(len(s.texts) for s in shards), len(to_do), root / SHARD_LIST,
                         root / MERGED if job.merge else None)


def work_of(export: Path, files: list[Path], options: PredictOptions, job: RayJob, on_bad_row: str) -> dict:
    """What the shards are made from: the export's files, the inputs' sha256, and every setting that changes a row
    (threads and batch size do not); a rerun with another is refused rather than mixing two kinds of rows."""
    return {"export": read_manifest(export)["files"], "inputs": [[str(f), file_sha256(f)] for f in files],
            "shard_rows": job.shard_rows, "on_bad_row": on_bad_row, "truncation": options.truncation,
            "abstain_below": options.abstain_below, "precision": options.precision, "backend": options.backend,
            "top_k": options.top_k}


def _shards(files: list[Path], meta, shard_rows: int, on_bad_row: str) -> tuple[list[Shard], list[dict]]:
    """The shards of every file, and the rows left out under --on-bad-row skip (source, line, reason)."""
    shards, skipped = [], []
    for number, path in enumerate(files, start=1):
        left_out = []
        texts, pairs, lines = read_texts(path, meta.text_column, meta.text_pair_column, on_bad_row, left_out,
                                         SKIP_OPTION, meta.header)
        say_skipped(path, left_out)
        skipped += [{"source": str(path), "line": line, "reason": reason} for line, reason in left_out]
        if meta.takes_text_pair and pairs is None:
            raise UserError(f"{path} has no {meta.text_pair_column} column, which this pair model reads")
        for start in range(0, len(texts), shard_rows):
            end = start + shard_rows
            shards.append(Shard(f"{number:04d}-{path.stem}-{start // shard_rows:06d}.jsonl", str(path),
                                texts[start:end], pairs[start:end] if pairs else None, lines[start:end]))
    return shards, skipped


class ShardScorer:
    """A Ray actor: loads the export once, then scores whole shards and writes each one's file."""

    def __init__(self, export: str, folder: str, options: PredictOptions):
        self.predictor, self.folder = Predictor(export, options), Path(folder)

    def __call__(self, batch: dict) -> dict:
        done = []
        for name, source, texts, pairs, lines in zip(batch["name"], batch["source"], batch["texts"], batch["pairs"],
                                                     batch["lines"]):
            texts, pairs = list(texts), (list(pairs) if pairs is not None and len(pairs) else None)
            results = self.predictor.predict(texts, text_pair=pairs)  # as the options say
            rows = [json.dumps({"source": source, **record(text, pairs[i] if pairs else None, int(lines[i]), result,
                                                           self.predictor.options.top_k)},
                               ensure_ascii=False) + "\n" for i, (text, result) in enumerate(zip(texts, results))]
            write_text_atomically(self.folder / name, "".join(rows))
            done.append(name)
        import ray

        return {"name": done, "node": [ray.get_runtime_context().get_node_id()] * len(done)}


def _score_on_ray(shards: list[Shard], export: Path, folder: Path, options: PredictOptions, job: RayJob) -> None:
    try:
        import ray
    except ImportError:
        raise UserError("predict --ray needs Ray: pip install 'paddle_ft[ray]'") from None
    threads = options.cpu_threads or 1
    ray.init(address=job.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}})
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # its progress lines would drown ours
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = context.print_on_execution_start = False
    try:
        actors = job.actors
        if actors is None:  # one actor per `threads` CPUs of the cluster
            actors = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
        items = [{"name": s.name, "source": s.source, "texts": s.texts, "pairs": s.pairs or [], "lines": s.lines}
                 for s in shards]
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            ShardScorer, batch_size=1, compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=threads,
            fn_constructor_kwargs={"export": str(export.resolve()), "folder": str(folder.resolve()),
                                   "options": options})
        nodes = {row["node"] for row in dataset.iter_rows()}  # runs the pipeline; each row is a shard written
        log(f"predict --ray: {actors} actors on {len(nodes)} node(s)")
    finally:
        ray.shutdown()


def _write_shard_list(root: Path, shards: list[Shard], scored: int, skipped: list[dict]) -> None:
    listed = [{"name": s.name, "source": s.source, "first_line": s.lines[0], "rows": len(s.texts),
               "sha256": file_sha256(root / SHARDS / s.name)} for s in shards]
    manifest = {"shards": listed, "rows": sum(len(s.texts) for s in shards), "scored_by_the_last_run": scored,
                "skipped": skipped}
    write_text_atomically(root / SHARD_LIST, json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")


def _merge(root: Path, shards: list[Shard]) -> None:
    """Every row in input order: the input files in the order given, each shard's rows in file order."""
    with atomic_file(root / MERGED) as out:
        for shard in shards:
            with open(root / SHARDS / shard.name, encoding="utf-8") as rows:
                for row in rows:
                    out.write(row)
    log(f"predict --ray: wrote {root / MERGED}")
