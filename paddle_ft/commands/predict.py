"""`predict`: classify texts with an exported folder; one JSON object per text."""
from __future__ import annotations

import contextlib
import glob
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from paddle_ft.arguments import positive_int, share
from paddle_ft.artifacts.export_folder import program_file, read_export_info
from paddle_ft.commands.flags import export_argument, inference_arguments
from paddle_ft.data.readers import read_texts
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Prediction, Predictor
from paddle_ft.tokenization import check_texts
from paddle_ft.io import atomic_file, check_output_file
from paddle_ft.log import LONG_INPUT, Progress, log

SKIP_OPTION = "--on-bad-row skip"  # what a bad row's error names as the way to leave bad rows out
CHUNK = 1024  # texts per predictor call on a long input, between progress updates


def run(export_dir: str, texts: list[str] | None, text_pair: list[str] | None, input_path: str | None,
        output_path: str | None, options: PredictOptions, on_bad_row: str = "error") -> int:
    program_file(Path(export_dir))  # a wrong folder first, before reading any input
    lines = None
    if texts is None:
        if text_pair:
            raise UserError("--text-pair goes with --text; with --input, put the second texts in a text_pair column")
        meta = read_export_info(Path(export_dir)).model  # a table's columns are named as in training
        skipped = []
        texts, text_pair, lines = read_texts(Path(input_path), meta.text_column, meta.text_pair_column, on_bad_row,
                                             skipped, SKIP_OPTION, meta.header)
        say_skipped(input_path, skipped)
    if lines is None:  # a file's texts were checked as it was read, named by their line
        check_texts(texts, "--text {}")
        if text_pair:
            check_texts(text_pair, "--text-pair {}")
    if output_path:
        check_output_file(output_path, "--output", {"--input": input_path})
    predictor = Predictor(export_dir, options)
    # without --output the answers go to standard output, and the progress to standard error, apart from them
    results = _predicted(predictor, texts, text_pair or None, None if output_path else sys.stderr)
    with atomic_file(output_path) if output_path else contextlib.nullcontext(sys.stdout) as out:
        for i, result in enumerate(results):  # to its end: the last chunk's progress line comes after its answers
            answer = record(texts[i], text_pair[i] if text_pair else None, lines[i] if lines else None, result,
                            options.top_k)
            out.write(json.dumps(answer, ensure_ascii=False) + "\n")
    return 0


def say_skipped(path, skipped: list[tuple[int, str]]) -> None:
    """--on-bad-row skip: the rows left out, on standard error (standard output may carry the answers)."""
    if skipped:
        shown = "; ".join(f"line {line}: {reason}" for line, reason in skipped[:5])
        log(f"predict: left out {len(skipped)} bad rows of {path} ({shown}{'; ...' if len(skipped) > 5 else ''})",
            sys.stderr)


def record(text: str, text_pair: str | None, line: int | None, result: Prediction, top_k: int | None = None) -> dict:
    """One output row: the text (and its pair, its line in the input file), then the answer as every interface
    gives it (`Prediction.as_dict`)."""
    return {"text": text, **({"text_pair": text_pair} if text_pair is not None else {}),
            **({"line": line} if line is not None else {}), **result.as_dict(top_k)}


def _predicted(predictor: Predictor, texts: list[str], text_pair: list[str] | None,
               progress_to=None) -> Iterator[Prediction]:
    """Every text's prediction, in order; a long input in chunks, with progress, each chunk's answers written before
    the next is scored (a model of 20,000 labels holds 20,000 probabilities per text). The answers are the texts'
    own: a text's prediction does not depend on the others in its batch."""
    if len(texts) <= LONG_INPUT:
        yield from predictor.predict(texts, text_pair=text_pair)  # as the predictor's options say
        return
    progress = Progress(len(texts), "predict", file=progress_to)
    for start in range(0, len(texts), CHUNK):
        pairs = text_pair[start:start + CHUNK] if text_pair else None
        yield from predictor.predict(texts[start:start + CHUNK], text_pair=pairs)
        progress.update(min(CHUNK, len(texts) - start))
    progress.close()


# the command line: `python -m paddle_ft predict` (registered in paddle_ft/cli.py)
def add_arguments(parser) -> None:
    export_argument(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", action="append", help="a text to classify; repeatable")
    parser.add_argument("--text-pair", action="append", help="the second text of a --text, in the same order, "
                                                             "for a model trained on text pairs; repeatable")
    source.add_argument("--input", action="append", help="a file of texts: .txt (one per line), or .tsv/.csv/.jsonl "
                        "with the text column the model was trained with (and its pair column for a pair model); "
                        "with --ray, repeatable and a glob pattern may name many")
    parser.add_argument("--output", help="JSON Lines file to write (default: standard output); with --ray, the "
                                         "folder for the shards, their manifest and --merge's file")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--top-k", type=positive_int, help="also list the K most probable labels of each text, best "
                                                           "first (\"top_k\"; as over HTTP)")
    parser.add_argument("--on-bad-row", choices=("error", "skip"), default="error",
                        help="a bad row of --input (undecodable, malformed, no text): stop at it, naming its file and "
                             "line (default), or leave it out and list it (at most 5%% of a file's rows)")
    parser.add_argument("--abstain-below", type=share, help="mark answers whose top probability is below this "
                                                            "\"abstained\" (default: the model's own threshold)")
    inference_arguments(parser)
    ray = parser.add_argument_group("on a Ray cluster (pip install 'paddle_ft[ray]'; docs/operations.md)")
    ray.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                     help="score --input on Ray: the cluster at ADDRESS (host:port, or auto), or without one a Ray "
                          "started for this run on this machine")
    ray.add_argument("--shard-rows", type=positive_int, default=10_000, help="texts per output shard (default 10000)")
    ray.add_argument("--actors", type=positive_int, help="scoring actors (default: the cluster's CPUs / --threads)")
    ray.add_argument("--merge", action="store_true", help="also write OUTPUT/predictions.jsonl, every row in input "
                                                          "order")
    ray.add_argument("--restart", action="store_true", help="delete what an earlier run left in --output and start "
                                                            "afresh (a rerun otherwise scores only the shards missing)")


def main(args) -> int:
    options = PredictOptions(args.device, args.threads, args.precision, args.backend, gpu_id=args.gpu_id,
                             use_tensorrt=args.tensorrt, batch_size=args.batch_size, truncation=args.truncation,
                             abstain_below=args.abstain_below, top_k=args.top_k)
    if args.ray is not None:
        from paddle_ft.commands import predict_ray

        if not args.input or not args.output:
            raise UserError("predict --ray scores files: give --input FILES and --output FOLDER")
        job = predict_ray.RayJob(None if args.ray == "local" else args.ray, args.shard_rows, args.actors, args.merge,
                                 args.restart)
        return predict_ray.run(args.export, args.input, args.output, options, job, args.on_bad_row)
    ray_only = [flag for flag, given in (("--merge", args.merge), ("--restart", args.restart),
                                         ("--actors", args.actors is not None)) if given]
    if ray_only:
        raise UserError(f"{ray_only[0]} goes with --ray")
    if args.input and (len(args.input) > 1 or glob.has_magic(args.input[0])):
        raise UserError("predict reads one --input file; for many (or a glob pattern), add --ray")
    return run(args.export, args.text, args.text_pair, args.input[0] if args.input else None, args.output,
               options, args.on_bad_row)
