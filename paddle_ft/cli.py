"""`python -m paddle_ft COMMAND`: the commands below; `tools/*.py` wrap `main`.

A `UserError` (bad config, bad data, bad path) is printed as one `error:` line and exits 2.
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

from paddle_ft import runtime
from paddle_ft.arguments import ArgumentParser, non_negative_float, non_negative_int, positive_int, share
from paddle_ft.errors import UserError
from paddle_ft.inference.backends import BACKENDS
from paddle_ft.io import describe_os_error
from paddle_ft.text import TRUNCATIONS


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    runtime.configure()  # environment and library noise, before paddle is imported
    try:
        return execute(args)
    except KeyboardInterrupt:  # also a second Ctrl-C that lands while an error below is being reported
        print("interrupted", file=sys.stderr)
        return 130


def execute(args) -> int:
    """Runs `args.run(args)`, a user's mistake as one `error:` line and exit 2 (also for tools/ scripts' parsers)."""
    from paddle_ft.engine.interrupt import TrainingInterrupted

    try:
        return args.run(args)
    except TrainingInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return exc.exit_code
    except UserError as exc:
        for line in exc.lines():
            print(f"error: {line}", file=sys.stderr)
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


def _add_labelling(commands) -> None:
    """export-tasks, select and import: round trips with Label Studio and doccano."""
    from paddle_ft.analysis.selection import STRATEGIES
    from paddle_ft.data.annotation import TOOLS

    export_tasks = _model_argument(commands.add_parser(
        "export-tasks", help="texts with the model's answers as pre-annotations, as Label Studio or doccano tasks"))
    export_tasks.add_argument("--input", required=True, metavar="FILE",
                              help="texts to label (.txt, or the model's text column of .tsv/.csv/.jsonl), or a "
                                   "label-issues review file")
    export_tasks.add_argument("--to", required=True, choices=TOOLS, help="the annotation tool")
    export_tasks.add_argument("--output", required=True, metavar="FILE", help="the tasks file to write (Label Studio: "
                              "a .json, with a .label_config.xml beside it; doccano: a .jsonl)")
    export_tasks.add_argument("--batch-size", type=positive_int, default=64)
    export_tasks.set_defaults(run=_export_tasks)
    select = _model_argument(commands.add_parser(
        "select", help="the unlabelled texts worth labelling next (active learning), as export-tasks writes them"))
    select.add_argument("--pool", required=True, metavar="FILE", help="unlabelled texts (as export-tasks' --input)")
    select.add_argument("--budget", required=True, type=positive_int, help="how many texts to select")
    select.add_argument("--strategy", choices=STRATEGIES, default="diverse",
                        help="uncertainty (entropy), margin (top-2 gap), diverse (uncertain and spread over the "
                             "embedding space; default) or random")
    select.add_argument("--to", required=True, choices=TOOLS, help="the annotation tool")
    select.add_argument("--output", required=True, metavar="FILE", help="the tasks file to write, as export-tasks")
    select.add_argument("--labelled", metavar="FILE", help="texts labelled already, left out of the pool and counted "
                        "as covered by diverse (default: the training file the model's manifest records)")
    select.add_argument("--seed", type=non_negative_int, default=0, help="random's seed (default 0)")
    select.add_argument("--batch-size", type=positive_int, default=64)
    select.set_defaults(run=_select)
    imported = commands.add_parser("import", help="a Label Studio or doccano export as rows train reads (or a "
                                                  "label-issues review answered there as data.corrections)")
    imported.add_argument("file", metavar="FILE", help="the tool's export: Label Studio JSON or JSON-MIN, doccano "
                                                      "JSONL")
    imported.add_argument("--from", dest="tool", required=True, choices=TOOLS, help="the annotation tool")
    imported.add_argument("--output", required=True, metavar="FILE", help="the .tsv/.csv/.jsonl file to write")
    imported.add_argument("--from-name", help="Label Studio: the control tag whose answers are the labels (needed "
                                              "when a project has several)")
    imported.add_argument("--text-column", default="text", help="the output's text column (default: text)")
    imported.add_argument("--label-column", default="label", help="the output's label column (default: label)")
    imported.set_defaults(run=_import)


def _parser() -> argparse.ArgumentParser:
    """Every command's flags, declared here with one meaning each: `--model` a trained model folder (OUT/best),
    `--export` an export folder, `-c/--config` and `-o` a recipe and its overrides, and the inference options
    (`--device`, `--gpu-id`, `--threads`, `--precision`, `--tensorrt`, `--backend`, `--truncation`) wherever a
    predictor runs."""
    parser = ArgumentParser(prog="paddle_ft", description="Fine-tune, export and serve BERT-family text classifiers "
                                                          "on PaddlePaddle. Every command takes --help.")
    commands = parser.add_subparsers(dest="command", required=True)

    _add_init(commands)
    for name, run, help, example in (
            ("train", _train, "fine-tune a classifier from a YAML config", "configs/demo.yaml"),
            ("pretrain", _pretrain, "pretrain an encoder on unlabeled text (masked LM)",
             "configs/pretrain-demo.yaml")):
        _config_arguments(commands.add_parser(name, help=help), example).set_defaults(run=run)
    distill = _config_arguments(commands.add_parser(
        "distill", help="train a smaller student on a trained teacher's answers"), "configs/distill-demo.yaml")
    distill.add_argument("--teacher", help="the teacher's model folder (OUT/best); sets distill.teacher")
    distill.set_defaults(run=_distill)
    _add_analysis(commands)
    _add_labelling(commands)
    _add_model_commands(commands)
    _add_quantize(commands)
    verify = commands.add_parser("verify", help="check that a saved model or an export is still what was written "
                                                "(every file, the engines, the score on a recorded data file)")
    verify.add_argument("folder", metavar="DIR", help="an export folder (written by export or quantize) or a "
                                                      "training run's best/")
    verify.add_argument("--data", metavar="FILE", help="one of the labelled files the model was trained or scored on: "
                        "checked against its recorded sha256, and the model scored on it again")
    verify.set_defaults(run=_verify)
    _add_predict(commands)

    from paddle_ft.serve.options import add_arguments as serve_arguments

    serve = commands.add_parser("serve", help="serve an exported model over HTTP with dynamic batching")
    _inference_arguments(_export_argument(serve))
    serve_arguments(serve)
    serve.set_defaults(run=_serve)

    # the bench is a measuring tool of the checkout (tools/bench/), not part of the installed library
    # (no option prefix, so that whatever options follow reach the message below instead of argparse's)
    bench = commands.add_parser("bench", help="benchmark against PaddleNLP, HF and ONNX Runtime: run from a checkout",
                                prefix_chars="\0", add_help=False)
    bench.add_argument("options", nargs="*")
    bench.set_defaults(run=_bench)
    return parser


def _config_arguments(command: argparse.ArgumentParser, example: str) -> argparse.ArgumentParser:
    command.add_argument("-c", "--config", required=True, help=f"the YAML recipe, e.g. {example}")
    command.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key (dotted path, YAML value); repeatable")
    return command


def _model_argument(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
    command.add_argument("--model", required=True, help="a model folder written by training (OUT/best)")
    return command


def _export_argument(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
    command.add_argument("--export", required=True, help="an export folder (written by export or quantize)")
    _renamed(command, "--model-dir", "--export")
    return command


def _inference_arguments(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What the predictor runs on and how it reads a long text: the same flags for predict and serve."""
    command.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    command.add_argument("--gpu-id", type=non_negative_int, default=0, help="GPU device id with --device gpu")
    command.add_argument("--threads", type=positive_int, help="CPU threads of the predictor (default: all usable "
                                                              "cores)")
    command.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                         help="bf16: oneDNN on CPUs with AVX512-BF16/AMX; fp16: GPU")
    command.add_argument("--tensorrt", action="store_true", help="GPU: run the graph with TensorRT")
    command.add_argument("--backend", choices=BACKENDS, help="the engine: paddle (Paddle Inference), onnxruntime "
                                                            "(fp32 CPU) or auto (default: fp32 on CPU, each call on "
                                                            "the engine measured fastest at its size at load)")
    command.add_argument("--truncation", choices=TRUNCATIONS, help="how a text longer than the model's max_length "
                                                                   "is cut (default: as training cut it)")
    return command


def _renamed(command: argparse.ArgumentParser, old: str, new: str) -> None:
    """`old`, a flag this command once took, refused in one line that names `new` (never a silent alias)."""
    class Refuse(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(f"{old} is now {new}: give {new} DIR")

    command.add_argument(old, nargs="?", action=Refuse, help=argparse.SUPPRESS)


def _add_init(commands) -> None:
    init = commands.add_parser("init", help="write a training config from your own labelled files")
    init.add_argument("--train", help="the labelled training file (.tsv, .csv or .jsonl, a header row)")
    init.add_argument("--labels", metavar="FILE", help="a label name, a tab and a short description per line: "
                                                       "zero-shot without --train, the prototypes' start with it")
    init.add_argument("--dev", help="a labelled file to pick the best model on (recommended)")
    init.add_argument("--test", help="a labelled file scored once, at the end")
    init.add_argument("--backbone", help="a pretrained model: a PaddleNLP name or a local PaddleNLP / Hugging Face "
                                         "folder (default: a small encoder trained from scratch)")
    init.add_argument("--output", required=True, help="the config to write, e.g. my.yaml (never overwritten)")
    decided = init.add_argument_group("overrule what init reads from the training file")
    decided.add_argument("--text-column", help="the column (or JSONL key) of the text")
    decided.add_argument("--text-pair-column", help="the column of a second text (the model classifies pairs)")
    decided.add_argument("--label-column", help="the column of the label (or label set)")
    decided.add_argument("--task", choices=("single_label", "multi_label"),
                         help="one label per row, or a set of labels per row")
    decided.add_argument("--label-delimiter", help="multi-label: what separates a row's label names (implies "
                                                   "--task multi_label)")
    decided.add_argument("--recipe", choices=("fine_tune", "few_shot"),
                         help="how to train (default: few_shot when a class has at most 32 rows and the backbone is "
                              "pretrained, else fine_tune)")
    decided.add_argument("--no-header", action="store_true", help="TSV/CSV files without a header row: every row "
                                                                  "is data, the columns are named 1, 2, ...")
    init.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                      help="set a key of the written config (dotted path, YAML value); repeatable")
    init.set_defaults(run=_init)


def _add_model_commands(commands) -> None:
    """eval, convert and export: a trained model (or a Hugging Face checkpoint) scored or turned into another
    folder."""
    evaluate = commands.add_parser("eval", help="score a trained model on a labelled file")
    _model_argument(evaluate)
    evaluate.add_argument("--data", required=True, help="labelled TSV / CSV / JSONL file")
    evaluate.add_argument("--errors", help="where to write misclassified rows (default: beside the model)")
    evaluate.add_argument("--batch-size", type=positive_int, default=64)
    evaluate.set_defaults(run=_eval)

    explain = commands.add_parser("explain", help="why a trained model answers: token attributions (integrated "
                                                  "gradients) and the nearest training texts")
    _model_argument(explain)
    explain.add_argument("--text", action="append", required=True, help="a text to explain; repeatable")
    explain.add_argument("--text-pair", action="append", help="the second text of a --text, in the same order, for a "
                                                              "model trained on text pairs; repeatable")
    explain.add_argument("--label", help="the label to explain (default: the model's answer; each label of a "
                                         "multi-label answer)")
    explain.add_argument("--steps", type=positive_int, default=50, help="integrated-gradients steps (more: a smaller "
                                                                        "completeness error, slower; default 50)")
    explain.add_argument("--neighbours", type=non_negative_int, default=3,
                         help="nearest labelled texts to show (0: none; default 3)")
    explain.add_argument("--data", help="labelled TSV / CSV / JSONL file to find the nearest texts in (default: the "
                                        "training file the model's manifest records)")
    explain.add_argument("--html", help="also write the explanations as highlighted text to this page")
    explain.set_defaults(run=_explain)

    convert = commands.add_parser("convert", help="convert a Hugging Face checkpoint folder to a PaddleNLP one")
    convert.add_argument("--from-hf", required=True, help="a Hugging Face folder: config.json, model.safetensors "
                                                          "or pytorch_model.bin, vocab.txt")
    convert.add_argument("--output", required=True, help="the PaddleNLP folder to create (model.backbone loads it)")
    convert.set_defaults(run=_convert)

    trim = commands.add_parser("trim-vocab", help="a copy of a backbone keeping only the vocabulary pieces your texts "
                                                  "use (SentencePiece: multilingual-e5, XLM-R, bge-m3)")
    trim.add_argument("--backbone", required=True, help="a Hugging Face or PaddleNLP folder with a tokenizer.json")
    trim.add_argument("--data", nargs="+", required=True, metavar="FILE",
                      help="the texts the model will read: .tsv / .csv / .jsonl (their text column) or .txt files")
    trim.add_argument("--output", required=True, help="the trimmed folder to create (model.backbone loads it)")
    # 5,000: the everyday characters and words an unseen text most likely needs, ~2% of e5-small's table
    trim.add_argument("--keep-top", type=non_negative_int, default=5000,
                      help="the most probable pieces kept besides the texts' own (default 5000)")
    trim.add_argument("--text-column", default="text", help="the text column of the data files (default: text)")
    trim.set_defaults(run=_trim_vocab)

    add = commands.add_parser("add-class", help="a prototype-head model with one class more, without retraining: its "
                                                "prototype from a few examples and/or a description")
    add.add_argument("--model", required=True,
                     help="the OUT/best folder of a model trained with model.head: prototype")
    add.add_argument("--label", required=True, help="the new class's name")
    add.add_argument("--examples", metavar="FILE", help="texts of the new class: .txt (one per line) or "
                                                        ".tsv/.csv/.jsonl (the model's text column)")
    add.add_argument("--description", help="a short description of the class (as zero-shot's label descriptions)")
    add.add_argument("--reference", metavar="FILE",
                     help="labelled rows of the model's classes that set how sure the new class must be (default: "
                          "the model's dev file, else its train file, as its manifest names them)")
    add.add_argument("--max-changed", type=share, default=0.005,
                     help="the largest share of the reference rows whose answer may become the new class "
                          "(default 0.005)")
    add.add_argument("--output", required=True, help="the new model folder to create (OUT2/best)")
    add.set_defaults(run=_add_class)

    remove = commands.add_parser("remove-class", help="a prototype-head model without one of its classes")
    remove.add_argument("--model", required=True,
                        help="the OUT/best folder of a model trained with model.head: prototype")
    remove.add_argument("--label", required=True, help="the class to remove")
    remove.add_argument("--output", required=True, help="the new model folder to create")
    remove.set_defaults(run=_remove_class)

    export = commands.add_parser("export", help="export a trained model to a static graph for Paddle Inference")
    _model_argument(export)
    export.add_argument("--output", required=True, help="the export folder to create (new or empty)")
    export.add_argument("--overwrite", action="store_true", help="replace an earlier export in --output")
    export.add_argument("--no-onnx", action="store_true", help="write no ONNX graph (the onnxruntime backend then "
                                                               "cannot serve the export)")
    export.set_defaults(run=_export)


def _add_predict(commands) -> None:
    predict = commands.add_parser("predict", help="classify texts with an exported model")
    _export_argument(predict)
    source = predict.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", action="append", help="a text to classify; repeatable")
    predict.add_argument("--text-pair", action="append", help="the second text of a --text, in the same order, "
                                                              "for a model trained on text pairs; repeatable")
    source.add_argument("--input", action="append", help="a file of texts: .txt (one per line), or .tsv/.csv/.jsonl "
                        "with the text column the model was trained with (and its pair column for a pair model); "
                        "with --ray, repeatable and a glob pattern may name many")
    predict.add_argument("--output", help="JSON Lines file to write (default: standard output); with --ray, the "
                                          "folder for the shards, their manifest and --merge's file")
    predict.add_argument("--batch-size", type=positive_int, default=32)
    predict.add_argument("--top-k", type=positive_int, help="also list the K most probable labels of each text, best "
                                                            "first (\"top_k\"; as over HTTP)")
    predict.add_argument("--on-bad-row", choices=("error", "skip"), default="error",
                         help="a bad row of --input (undecodable, malformed, no text): stop at it, naming its file and "
                              "line (default), or leave it out and list it (at most 5%% of a file's rows)")
    predict.add_argument("--abstain-below", type=share, help="mark answers whose top probability is below this "
                                                             "\"abstained\" (default: the model's own threshold)")
    _inference_arguments(predict)
    ray = predict.add_argument_group("on a Ray cluster (pip install 'paddle_ft[ray]'; docs/operations.md)")
    ray.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                     help="score --input on Ray: the cluster at ADDRESS (host:port, or auto), or without one a Ray "
                          "started for this run on this machine")
    ray.add_argument("--shard-rows", type=positive_int, default=10_000, help="texts per output shard (default 10000)")
    ray.add_argument("--actors", type=positive_int, help="scoring actors (default: the cluster's CPUs / --threads)")
    ray.add_argument("--merge", action="store_true", help="also write OUTPUT/predictions.jsonl, every row in input "
                                                          "order")
    ray.add_argument("--restart", action="store_true", help="delete what an earlier run left in --output and start "
                                                            "afresh (a rerun otherwise scores only the shards missing)")
    predict.set_defaults(run=_predict)


def _add_analysis(commands) -> None:
    """audit, cv, label-issues, sweep and report: the data and the runs, looked at."""
    audit = _config_arguments(commands.add_parser(
        "audit", help="check a config's data: duplicates, leakage, conflicting labels, ..."), "configs/demo.yaml")
    audit.add_argument("--output", help="folder for audit.json (default: OUTPUT_DIR/audit)")
    audit.add_argument("--strict", action="store_true", help="exit 1 on leakage between splits or conflicting labels")
    audit.set_defaults(run=_audit)
    cv = _config_arguments(commands.add_parser(
        "cv", help="K-fold cross-validation of a config (mean ± std of every metric)"), "configs/demo.yaml")
    cv.add_argument("--folds", type=positive_int, default=5, help="number of folds (default 5)")
    cv.add_argument("--restart", action="store_true", help="delete the folds an earlier cv left in OUTPUT_DIR and "
                                                           "start afresh (a rerun otherwise resumes them)")
    cv.set_defaults(run=_cv)
    issues = _config_arguments(commands.add_parser(
        "label-issues", help="find probably mislabelled rows of train and dev (out-of-fold confident learning)"),
        "configs/demo.yaml")
    issues.add_argument("--folds", type=positive_int, default=5, help="number of folds (default 5)")
    issues.add_argument("--output", required=True, help="the folder for the folds, the table, the page and the review "
                                                        "file (a rerun into it resumes)")
    issues.add_argument("--prune", action="store_true", help="also train with every row and without the flagged ones, "
                                                             "and compare them on test")
    issues.add_argument("--fold-reports", action="store_true", help="also write each fold's report.html (skipped "
                                                                    "by default: tens of seconds each)")
    issues.add_argument("--restart", action="store_true", help="delete what an earlier label-issues left in --output "
                                                               "and start afresh")
    issues.set_defaults(run=_label_issues)
    sweep = _config_arguments(commands.add_parser(
        "sweep", help="hyperparameter search with Optuna (resumable; see docs/analysis.md)"), "configs/demo.yaml")
    sweep.add_argument("--space", required=True, help="the search space YAML (params, sampler, trials, pruner)")
    sweep.add_argument("--trials", type=positive_int, help="trials in all (default: the space's)")
    sweep.add_argument("--storage", help="Optuna storage URL (default sqlite:///OUT/study.db; postgresql://... for "
                                         "several machines)")
    sweep.add_argument("--restart", action="store_true", help="delete the study and trials an earlier sweep left "
                                                              "and start afresh (a rerun otherwise resumes them)")
    sweep.set_defaults(run=_sweep)
    report = commands.add_parser("report", help="write OUT/report.html for a finished training run")
    report.add_argument("run_dir", metavar="OUT", help="the output_dir of a finished run")
    report.set_defaults(run=_report)


def _add_quantize(commands) -> None:
    quantize = commands.add_parser("quantize", help="quantize an export to int8 for ONNX Runtime, checked on "
                                                    "labelled texts")
    quantize.add_argument("--export", required=True, help="an export folder with model.onnx (tools/export.py)")
    _renamed(quantize, "--model", "--export")
    quantize.add_argument("--data", required=True, help="labelled TSV / CSV / JSONL file for the accuracy check")
    quantize.add_argument("--output", required=True, help="the int8 export folder to create (new or empty)")
    quantize.add_argument("--method", choices=("dynamic", "static"), default="dynamic",
                          help="dynamic: activation ranges per batch at run time (default); static: fixed from "
                               "--calibration texts")
    quantize.add_argument("--calibration", help="texts (.txt, or a text column) to fix activation ranges, for "
                                                "--method static")
    quantize.add_argument("--max-drop", type=non_negative_float, default=1.0,
                          help="accuracy points the int8 model may lose on --data (default 1)")
    quantize.add_argument("--min-agreement", type=share, default=0.99,
                          help="the share of --data texts on which int8 must give the fp32 answer (default 0.99)")
    quantize.set_defaults(run=_quantize)


def _init(args) -> int:
    import paddle_ft.commands.init as command

    from paddle_ft.data.sniff import Choices

    given = Choices(args.text_column, args.text_pair_column, args.label_column, args.task, args.label_delimiter,
                    header=not args.no_header)
    return command.run(args.train, args.dev, args.test, args.backbone, args.output, given, args.override, args.labels,
                       args.recipe)


def _pretrain(args) -> int:
    import paddle_ft.commands.pretrain as command

    return command.run(args.config, args.override)


def _train(args) -> int:
    import paddle_ft.commands.train as command

    return command.run(args.config, args.override)


def _distill(args) -> int:
    import paddle_ft.commands.distill as command

    return command.run(args.config, args.override, args.teacher)


def _audit(args) -> int:
    import paddle_ft.commands.audit as command

    return command.run(args.config, args.override, args.output, args.strict)


def _cv(args) -> int:
    import paddle_ft.commands.cv as command

    return command.run(args.config, args.override, args.folds, args.restart)


def _explain(args) -> int:
    import paddle_ft.commands.explain as command

    return command.run(args.model, args.text, args.text_pair, args.label, args.steps, args.neighbours,
                       args.data, args.html)


def _label_issues(args) -> int:
    import paddle_ft.commands.label_issues as command

    return command.run(args.config, args.override, args.folds, args.output, args.prune, args.restart,
                       args.fold_reports)


def _sweep(args) -> int:
    import paddle_ft.commands.sweep as command

    return command.run(args.config, args.override, args.space, args.storage, args.trials, args.restart)


def _report(args) -> int:
    import paddle_ft.commands.report as command

    return command.run(args.run_dir)


def _eval(args) -> int:
    import paddle_ft.commands.evaluate as command

    report = command.run(args.model, args.data, args.errors, args.batch_size)
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


def _convert(args) -> int:
    from paddle_ft.convert import convert_hf_folder, is_hf_folder
    from paddle_ft.io import check_output_folder

    source, output = Path(args.from_hf), Path(args.output)
    if not is_hf_folder(source):
        raise UserError(f"--from-hf {source} is not a Hugging Face checkpoint folder (config.json with "
                        "model.safetensors or pytorch_model.bin)")
    check_output_folder(output, "--output")
    if output.exists() and any(output.iterdir()):
        raise UserError(f"--output {output} already exists and is not empty; convert into a new folder")
    report = convert_hf_folder(source, output)
    print(f"converted {report['converted']} tensors of {source} into {output} (left out: "
          f"{', '.join(report['left_out']) or 'nothing'}); use it with -o model.backbone={output}")
    return 0


def _export_tasks(args) -> int:
    from paddle_ft.commands.annotation import export_tasks

    return export_tasks(args.model, args.input, args.to, args.output, args.batch_size)


def _select(args) -> int:
    from paddle_ft.commands.annotation import select

    return select(args.model, args.pool, args.budget, args.strategy, args.to, args.output, args.labelled, args.seed,
                  args.batch_size)


def _import(args) -> int:
    from paddle_ft.commands.annotation import import_annotations

    return import_annotations(args.tool, args.file, args.output, args.from_name, args.text_column, args.label_column)


def _add_class(args) -> int:
    from paddle_ft.commands.classes import add_class

    return add_class(args.model, args.label, args.examples, args.description, args.output, args.reference,
                     args.max_changed)


def _remove_class(args) -> int:
    from paddle_ft.commands.classes import remove_class

    return remove_class(args.model, args.label, args.output)


def _trim_vocab(args) -> int:
    from paddle_ft.commands import trim_vocab
    from paddle_ft.config import ModelConfig

    return trim_vocab.run(args.backbone, args.data, args.output, args.keep_top, args.text_column,
                          ModelConfig().cache_dir)


def _export(args) -> int:
    from paddle_ft.export import export_model

    info = export_model(Path(args.model), Path(args.output), overwrite=args.overwrite, onnx=not args.no_onnx)
    onnx = f", ONNX graph {info.parity_max_abs_diff_onnx:.3g}" if info.onnx_file else \
        f" (no ONNX graph: {info.extra.get('onnx_skipped')})"
    print(f"exported to {args.output}: max abs logit difference vs dygraph {info.parity_max_abs_diff:.3g}{onnx}")
    return 0


def _quantize(args) -> int:
    from paddle_ft.inference.quantize import quantize_export

    check = quantize_export(Path(args.export), Path(args.data), Path(args.output), args.method,
                            Path(args.calibration) if args.calibration else None, args.max_drop, args.min_agreement)
    print(f"quantized to {args.output}: accuracy {check['accuracy_int8']:.4f} (fp32 {check['accuracy_fp32']:.4f}), "
          f"the same answer on {check['agreement']:.2%} of {check['texts']} texts")
    return 0


def _verify(args) -> int:
    import paddle_ft.commands.verify as command

    return command.run(args.folder, args.data)


def _predict(args) -> int:
    import paddle_ft.commands.predict as command

    from paddle_ft.inference.options import PredictOptions

    options = PredictOptions(args.device, args.threads, args.precision, args.backend, gpu_id=args.gpu_id,
                             use_tensorrt=args.tensorrt, batch_size=args.batch_size, truncation=args.truncation,
                             abstain_below=args.abstain_below, top_k=args.top_k)
    if args.ray is not None:
        import paddle_ft.commands.predict_ray as on_ray

        if not args.input or not args.output:
            raise UserError("predict --ray scores files: give --input FILES and --output FOLDER")
        job = on_ray.RayJob(None if args.ray == "local" else args.ray, args.shard_rows, args.actors, args.merge,
                            args.restart)
        return on_ray.run(args.export, args.input, args.output, options, job, args.on_bad_row)
    ray_only = [flag for flag, given in (("--merge", args.merge), ("--restart", args.restart),
                                         ("--actors", args.actors is not None)) if given]
    if ray_only:
        raise UserError(f"{ray_only[0]} goes with --ray")
    if args.input and (len(args.input) > 1 or glob.has_magic(args.input[0])):
        raise UserError("predict reads one --input file; for many (or a glob pattern), add --ray")
    return command.run(args.export, args.text, args.text_pair, args.input[0] if args.input else None, args.output,
                       options, args.on_bad_row)


def _serve(args) -> int:
    from paddle_ft.serve.main import main

    return main(args)


def _bench(args) -> int:
    raise UserError("the bench runs from a checkout of paddle_ft, not from the installed package: "
                    "python tools/bench.py [--output DIR] (or make bench); see docs/performance.md")


if __name__ == "__main__":
    sys.exit(main())
