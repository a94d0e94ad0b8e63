"""`predict`: classify texts with an exported folder, one JSON object per text (workflows.predict_files); with
--ray, many files on a Ray cluster (workflows.predict_ray)."""
from __future__ import annotations

import glob

from paddle_ft.arguments import positive_int, share
from paddle_ft.commands.flags import Files, export_argument, inference_arguments, overwrite_argument
from paddle_ft.errors import UserError
from paddle_ft.io import check_new_files
from paddle_ft.log import log

FILES = Files(reads=("--input",), writes=("--output-file", "--output"))


def add_arguments(parser) -> None:
    export_argument(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", action="append", help="a text to classify; repeatable")
    parser.add_argument("--text-pair", action="append", help="the second text of a --text, in the same order, "
                                                             "for a model trained on text pairs; repeatable")
    source.add_argument("--input", action="append", help="a file of texts: .txt (one per line), or .tsv/.csv/.jsonl "
                        "with the text column the model was trained with (and its pair column for a pair model); "
                        "with --ray, repeatable and a glob pattern may name many")
    parser.add_argument("--output-file", metavar="FILE", help="the JSON Lines file to write (default: standard "
                                                              "output)")
    overwrite_argument(parser, "--output-file")
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
    ray.add_argument("--output", metavar="DIR", help="with --ray: the folder for the shards, their manifest and "
                                                     "--merge's file")
    ray.add_argument("--shard-rows", type=positive_int, default=10_000, help="texts per output shard (default 10000)")
    ray.add_argument("--actors", type=positive_int, help="scoring actors (default: the cluster's CPUs / --threads)")
    ray.add_argument("--merge", action="store_true", help="also write OUTPUT/predictions.jsonl, every row in input "
                                                          "order")
    ray.add_argument("--restart", action="store_true", help="delete what an earlier run left in --output and start "
                                                            "afresh (a rerun otherwise scores only the shards missing)")


def main(args) -> int:
    from paddle_ft.inference.options import PredictOptions

    options = PredictOptions(args.device, args.threads, args.precision, args.backend, gpu_id=args.gpu_id,
                             use_tensorrt=args.tensorrt, batch_size=args.batch_size, truncation=args.truncation,
                             abstain_below=args.abstain_below, top_k=args.top_k)
    if args.ray is not None:
        return _on_ray(args, options)
    ray_only = [flag for flag, given in (("--output", args.output is not None), ("--merge", args.merge),
                                         ("--restart", args.restart), ("--actors", args.actors is not None)) if given]
    if ray_only:
        raise UserError("--output is a folder, with --ray; give --output-file FILE for the answers" if
                        ray_only[0] == "--output" else f"{ray_only[0]} goes with --ray")
    if args.input and (len(args.input) > 1 or glob.has_magic(args.input[0])):
        raise UserError("predict reads one --input file; for many (or a glob pattern), add --ray")
    from paddle_ft.workflows.predict_files import predict

    check_new_files({"--output-file": args.output_file}, args.overwrite)

    predict(args.export, args.text, args.text_pair, args.input[0] if args.input else None, args.output_file, options,
            args.on_bad_row)
    return 0


def _on_ray(args, options) -> int:
    from paddle_ft.workflows import predict_ray

    if args.output_file:
        raise UserError("with --ray the answers go to shards in a folder: give --output DIR, not --output-file")
    if not args.input or not args.output:
        raise UserError("predict --ray scores files: give --input FILES and --output FOLDER")
    job = predict_ray.RayJob(None if args.ray == "local" else args.ray, args.shard_rows, args.actors, args.merge,
                             args.restart)
    done = predict_ray.predict_on_ray(args.export, args.input, args.output, options, job, args.on_bad_row)
    log(f"predict --ray: {done.rows} texts in {done.shards} shards, listed in {done.shard_list}"
        + (f"; every row in input order in {done.merged}" if done.merged else ""))
    return 0
