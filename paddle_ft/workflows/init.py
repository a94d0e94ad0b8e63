"""A training config written from a user's own labelled files (the `init` command's work).

    python -m paddle_ft init --train reviews.csv [--dev dev.csv] [--backbone DIR] --output-file my.yaml
    python -m paddle_ft init --labels labels.tsv --backbone DIR [--test test.csv] --output-file my.yaml

The second is zero-shot: no training rows, a label name and a description per line of labels.tsv, and a
sentence-embedding backbone; the model is the descriptions' embeddings (model.head: prototype). With training rows
and few of them per class (FEW_SHOT_ROWS) and a pretrained backbone, init picks the few-shot recipe.

It reads the files (format from the extension; the text, second-text and label columns; one label per row or a
set; the labels and their counts; the length of the texts), writes a vocabulary from the training text when there
is no pretrained backbone, picks the recipe's settings for that kind of model, and prints what it decided, why, and
the command that trains it. Every file goes through the readers, so a bad row is their one-line error.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from paddle_ft.config import load_config, parse_override, set_dotted
from paddle_ft.data.labels import read_label_descriptions
from paddle_ft.data.readers import Columns, format_of, read_examples
from paddle_ft.data.sniff import Choices, Layout, propose_max_length, sniff_layout
from paddle_ft.data.vocab import character_vocab
from paddle_ft.errors import DataError, UserError
from paddle_ft.io import atomic_path, check_output_file, write_text_atomically
from paddle_ft.log import elapsed, log
from paddle_ft.models.backbone import check_folder, is_paddlenlp_name, looks_like_a_path, positions_in_config
from paddle_ft.models.hierarchy import Hierarchy
from paddle_ft.runtime import cpu_supports_bf16
from paddle_ft.tokenization import fastest, load_tokenizer
from paddle_ft.workflows.build import read_dataset
from paddle_ft.workflows.recipe import TRIM_ABOVE, encoder_facts, learning_rate_for, recipe_notes

# configs/demo-scratch.yaml's encoder and settings: a tiny encoder that learns from the labels alone
SCRATCH = {"architecture": "bert", "hidden_size": 128, "num_layers": 2, "num_heads": 2, "intermediate_size": 512}
SCRATCH_OPTIMIZER = {"learning_rate": 5.0e-4, "warmup": 0.1}
# the usual fine-tuning of a pretrained BERT-family model (configs/finetune-*.yaml): 2e-5 to 5e-5; a local folder's
# rate is chosen for its size instead (`recipe`)
PRETRAINED_OPTIMIZER = {"learning_rate": 3.0e-5, "warmup": 0.1}
# optimizer steps a run should reach however small the data (3 epochs of a few hundred rows are a few dozen steps,
# from which a scratch encoder learns nothing), and the epochs allowed to reach them
TARGET_STEPS = {"scratch": 300, "pretrained": 100}
EPOCHS = {"scratch": (3, 50), "pretrained": (3, 10)}
IMBALANCE = 5  # the most frequent label this many times the rarest: say how to weigh them
# at most this many rows in the smallest class: the few-shot recipe (contrastive pairs, prototypes) beats fine-tuning
# there (docs/tasks.md has the measured table), with SetFit's settings (one epoch of 20 passes, batch 16) and the rate
# that scored best on a draw of 8 rows per class scored on the demo's dev split (e5-small: 2e-5 0.680, 5e-5 0.800,
# 1e-4 0.728; 40 passes at 5e-5 0.762)
FEW_SHOT_ROWS = 32
# the texts init trims a large SentencePiece vocabulary on must be this many at least (distinct): fewer leave pieces
# common in new text out (16 rows per class kept 821 pieces of e5-small, and 13.6% of dev's tokens read as <unk>)
MIN_TRIM_TEXTS = 1000
KEEP_TOP = 5000  # and the most probable pieces beyond theirs (trim-vocab's default)
PATH_SEPARATOR = "/"  # labels written as paths of a tree: 电子/手机
FEW_SHOT_TRAIN = {"recipe": "few_shot", "epochs": 1, "batch_size": 16, "few_shot": {"iterations": 20},
                  "optimizer": {"learning_rate": 5.0e-5, "warmup": 0.1}}


@dataclass(frozen=True)
class InitRequest:
    """What `write_recipe` is given: the user's files, the backbone, and what they decided themselves."""

    output: str
    """The config file to write (never overwritten)."""
    train: str | None = None
    dev: str | None = None
    test: str | None = None
    labels: str | None = None
    """A label name and a description per line: zero-shot without `train`, the prototypes' start with it."""
    backbone: str | None = None
    """A pretrained model (None: a small encoder trained from scratch)."""
    recipe: str | None = None
    """fine_tune or few_shot (None: init decides)."""
    given: Choices = Choices()
    """Columns, task, delimiter and header as the user set them (None: read from the training file)."""
    overrides: tuple[str, ...] = ()
    """KEY=VALUE settings of the written config."""
    forecast: bool = True
    """With a backbone and training rows: time a few training steps here and say what the run will take."""
    budget_minutes: float | None = None
    """Fit the recipe into this many minutes on this machine (fewer epochs, or part of one), as timed."""
    trim: bool = True
    """Trim a large SentencePiece vocabulary to the data's texts where there are enough of them (MIN_TRIM_TEXTS)."""


def write_recipe(request: InitRequest) -> Path:
    """Writes `request.output`, a recipe for the user's files (what their layout, labels and lengths say, and the
    backbone), once train's own reading accepts it; the config's path."""
    train, dev, test, backbone, output = request.train, request.dev, request.test, request.backbone, request.output
    labels, recipe, overrides, given = request.labels, request.recipe, request.overrides, request.given
    if train is None and labels is None:
        raise UserError("give --train FILE (your labelled rows), or --labels FILE (a label name and a short "
                        "description per line: a zero-shot model)")
    if recipe == "few_shot" and backbone is None:
        raise UserError("--recipe few_shot needs a pretrained --backbone (a sentence-embedding model such as "
                        "multilingual-e5): the recipe tunes what the encoder already knows")
    if labels is not None and backbone is None:
        raise UserError("--labels needs a pretrained --backbone, a sentence-embedding model such as multilingual-e5 "
                        "(make e5-small): an encoder trained from nothing cannot compare a text with a description")
    target = Path(output)
    if target.suffix not in (".yaml", ".yml"):
        raise UserError(f"--output-file {output}: give a .yaml file to write the config to")
    if target.exists() or target.is_symlink():
        raise UserError(f"--output-file {output} already exists; choose another name (init never overwrites a "
                        "config)")
    check_output_file(target, "--output-file")
    if backbone is None and vocab_file(target).exists():
        raise UserError(f"{vocab_file(target)} already exists, and init writes the scratch encoder's vocabulary "
                        "there; choose another --output-file name (init never overwrites a file)")
    if backbone is not None:
        check_backbone(backbone)
    if request.budget_minutes is not None and not (request.forecast and train is not None and backbone is not None
                                                   and Path(backbone).expanduser().is_dir()):
        raise UserError("--budget fits the recipe to minutes timed here, which takes --train and a --backbone folder "
                        "(and no --no-forecast)")
    settings = dict(parse_override(item) for item in overrides)
    on_bad_row, skip_option = settings.get("data.on_bad_row", "error"), "-o data.on_bad_row=skip"
    paths = {name: path for name, path in (("train", train), ("dev", dev), ("test", test)) if path is not None}
    descriptions = read_label_descriptions(labels, "--labels") if labels is not None else None
    layout = sniff_layout(Path(next(iter(paths.values()))), given, on_bad_row, skip_option) if paths else \
        Layout("tsv", "text", "label", reasons=["no data file: files to score are read with text and label columns"])
    if descriptions is not None and layout.multi_label:
        raise UserError(f"{next(iter(paths.values()))} holds sets of labels; a zero-shot model gives one label per "
                        "text (prototype head): give files with one label per row")
    columns = Columns.of(layout, layout.multi_label)
    splits = {name: read_examples(path, format_of(path), columns, on_bad_row=on_bad_row, skip_option=skip_option)[0]
              for name, path in paths.items()}
    counts = Counter(name for example in splits.get("train", []) for name in example.label_names)
    if descriptions is not None and train is None:
        _check_zero_shot_labels(paths, splits, descriptions, labels)
        config, notes = _zero_shot_config(layout, paths, splits, backbone, labels, descriptions, target)
    else:
        _check_labels(layout, paths, splits, counts)
        config, notes = _config(layout, paths, splits, counts, backbone, target, recipe)
        if backbone is not None and request.trim:
            notes = _trimmed_for_the_data(config, notes, backbone, paths, splits)
        if descriptions is not None:
            _check_zero_shot_labels(paths, splits, descriptions, labels)
            config["data"]["label_descriptions"] = labels
            notes.append(f"each class's prototype starts from its description in {labels}")
    try:
        for key, value in settings.items():
            set_dotted(config, key, value)
        _write_checked(target, _header(layout, notes, target), config)
    except UserError:
        if backbone is None:  # the scratch encoder's vocabulary, written by this init (one already there is refused
            vocab_file(target).unlink(missing_ok=True)  # above): a refused init leaves nothing that blocks its rerun
        raise
    for line in [*layout.reasons, *notes]:
        log(line)
    if backbone is not None and train is not None and request.forecast:
        if Path(backbone).expanduser().is_dir():
            _plan_with_the_machine(target, _header(layout, notes, target), config, request.budget_minutes)
        else:  # a name: its weights are fetched by the first train, not here
            log(f"not timed here: {backbone} is fetched by the first train; run init with its folder to have the "
                "minutes per epoch and the peak memory said")
    log(f"wrote {target}; train with: python -m paddle_ft train -c {target}")
    if dev is not None:  # said here, not in the config: it is this machine's CPU, not the recipe's
        reduced = "int8 and bf16 (this CPU has it)" if cpu_supports_bf16() else "int8"
        log(f"then export with --check-precision {dev}: it times {reduced} against fp32 on your dev texts and "
            "recommends the fastest whose answers hold")
    return target


def _trimmed_for_the_data(config: dict, notes: list[str], backbone: str, paths: dict, splits: dict) -> list[str]:
    """Where the backbone is a local SentencePiece folder with a large vocabulary (TRIM_ABOVE) and the data files hold
    MIN_TRIM_TEXTS texts or more, its copy trimmed to the pieces they use (and the KEEP_TOP most probable others) in a
    folder named after the data, reused when the same texts made it; the config trains on it. The notes, with what was
    done in place of the offer to trim."""
    from paddle_ft.models.trim import TRIM_INFO, trim_folder, trimmed_from
    from paddle_ft.tokenization import tokenizer_kind

    source, facts = Path(backbone).expanduser(), encoder_facts(Path(backbone).expanduser())
    if facts is None or facts.vocab <= TRIM_ABOVE or tokenizer_kind(source) != "sentencepiece":
        return notes
    texts = [t for examples in splits.values() for e in examples for t in (e.text, e.text_pair) if t]
    kept = [note for note in notes if not note.startswith("its embedding table has")]
    if len(set(texts)) < MIN_TRIM_TEXTS:
        return kept + [f"the vocabulary is not trimmed: {len(set(texts))} distinct texts are too few to trim on (a "
                       f"piece they do not use would read as <unk> in every new text); with {MIN_TRIM_TEXTS} or more, "
                       f"python -m paddle_ft trim-vocab --backbone {backbone} --data YOUR_FILES UNLABELLED_TEXTS "
                       "--output DIR, then set model.backbone to DIR (less memory, faster training)"]
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:8]
    folder = source.parent / f"{source.name}-trimmed-{Path(paths['train']).stem}-{digest}"
    report = trimmed_from(str(folder))
    if report is None and (folder.exists() or folder.is_symlink()):  # not a trim of these texts: never replaced
        raise UserError(f"{folder} exists and is not a trim init made of these texts (no readable "
                        f"{TRIM_INFO}); move it away, or give --no-trim")
    if report is None:
        log(f"trimming {backbone}'s vocabulary ({facts.vocab:,} rows) to the pieces of your {len(texts):,} texts")
        report = trim_folder(source, texts, folder, KEEP_TOP)
    config["model"]["backbone"] = str(folder)
    return kept + [f"model.backbone {folder}: {backbone} trimmed to your train, dev and test texts, {report.describe()}"
                   " (less memory, faster training; a new text's pieces outside them read as <unk>, which training "
                   "and drift checks count)"]


def _write_checked(target: Path, header: str, config: dict) -> None:
    """The config's YAML at `target`, in place only once train's own reading accepts it."""
    with atomic_path(target) as draft:
        write_text_atomically(draft, header + yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
        try:
            checked = load_config(draft)
            read_dataset(checked.data, checked.task)
        except UserError as exc:  # named after the config it would have been: the draft is gone when this is read
            raise UserError(f"init wrote nothing: train would refuse this config ("
                            f"{str(exc).replace(str(draft), str(target))}); change the -o setting or file it names")\
                from None


def _plan_with_the_machine(target: Path, header: str, config: dict, budget_minutes: float | None) -> None:
    """Times the written recipe here and says what its run will take; with a budget, rewrites it to fit (fewer
    epochs, or part of one). A recipe that cannot be timed (too little memory, say) is kept, and why is said."""
    from paddle_ft.workflows.forecast import forecast

    log(f"timing a few training steps of {target} on this machine (--no-forecast skips it)")
    try:
        plan = forecast(str(target))
    except (UserError, MemoryError, RuntimeError) as exc:
        log(f"warning: could not time the recipe here ({str(exc).splitlines()[0][:200]}); it is written as planned")
        return
    log(plan.describe())
    if budget_minutes is None:
        return
    try:
        changes = plan.fitted(budget_minutes * 60)
    except ValueError as exc:
        target.unlink()  # refused: no recipe is left behind that would not fit
        raise UserError(f"--budget {budget_minutes:g}: {exc}; give more minutes, or fewer training rows") from None
    if changes is None:
        log(f"it fits your budget of {budget_minutes:g} minutes")
        return
    for key, value in changes.items():
        set_dotted(config, key, value)
    epochs = changes.get("train.epochs", changes.get("train.max_steps", 0) / plan.steps_per_epoch)
    what = ", ".join(f"{key}: {value}" for key, value in changes.items())
    note = (f"--budget {budget_minutes:g}: {what}, about {elapsed(plan.total_seconds(epochs))} here instead of "
            f"{elapsed(plan.total_seconds())}")
    if "train.max_steps" in changes:
        note += " (part of one epoch: expect a weaker model than a full epoch gives; more minutes or fewer rows)"
    target.unlink()  # the recipe init itself wrote a moment ago
    with contextlib.redirect_stdout(io.StringIO()):  # its files' row counts were said already
        _write_checked(target, header + f"# {note}\n", config)
    log(note)


def check_backbone(backbone: str) -> None:
    """A --backbone folder is checked as a whole (models.backbone.check_folder); one that is neither a folder here nor
    a model PaddleNLP can fetch is a typing mistake."""
    if Path(backbone).expanduser().is_dir():
        check_folder(Path(backbone).expanduser(), f"--backbone {backbone}")
        return
    if looks_like_a_path(backbone) or not is_paddlenlp_name(backbone):
        raise UserError(f"--backbone {backbone}: there is no model folder there, and it is not a PaddleNLP model name; "
                        "give an existing PaddleNLP or Hugging Face folder (make e5-small writes "
                        "models/multilingual-e5-small), or a name such as ernie-3.0-medium-zh")


def _check_labels(layout: Layout, paths: dict, splits: dict, counts: Counter) -> None:
    """What train would refuse, said now: one label only, or a dev/test label train never shows the model."""
    if len(counts) < 2 and not layout.multi_label:
        only = next(iter(counts))
        raise UserError(f"{paths['train']}: every row has the label '{only}' (label column '{layout.label_column}'); "
                        "a classifier needs at least two labels: add rows of another label, or name the right "
                        "column with --label-column")
    for split in ("dev", "test"):
        for example in splits.get(split, []):
            unseen = [name for name in example.label_names if name not in counts]
            if unseen:
                raise DataError(paths[split], example.line, f"the label '{unseen[0]}' never occurs in "
                                f"{paths['train']}, so the model could never answer it; add training rows with "
                                "it, or remove the row")


def _check_zero_shot_labels(paths: dict, splits: dict, descriptions: dict, labels: str) -> None:
    """Every label of the data files is described (else the model could never answer it)."""
    for split, examples in splits.items():
        for example in examples:
            if example.label not in descriptions:
                raise DataError(paths[split], example.line, f"the label '{example.label}' is not described in "
                                f"{labels}, so the model could never answer it; add a line for it there")


def _zero_shot_config(layout: Layout, paths: dict, splits: dict, backbone: str, labels: str, descriptions: dict,
                      target: Path) -> tuple[dict, list]:
    """A zero-shot config: no training file, the prototypes the descriptions' embeddings."""
    facts = encoder_facts(Path(backbone))
    notes = [f"zero-shot: {len(descriptions)} labels described in {labels} and no training file; each class is the "
             "embedding of its description (model.head: prototype), and train scores it on "
             + (" and ".join(name for name in ("dev", "test") if name in paths) or "nothing (add --dev or --test)")]
    data = {"train": None, "dev": paths.get("dev"), "test": paths.get("test"), "text_column": layout.text_column,
            "label_column": layout.label_column, "label_descriptions": labels, "labels": list(descriptions)}
    if not layout.header:
        data["header"] = False
    tokenizer, limit = _backbone_tokenizer(backbone)
    scored = [e for examples in splits.values() for e in examples]
    fallback = min(128, limit)  # the backbone's own limit, where it takes fewer tokens
    max_length, why = (fallback, f"max_length {fallback}: no file to measure the texts by")
    if scored and tokenizer is not None:
        max_length, why = propose_max_length(_lengths(scored, tokenizer), False, limit, "the texts to score")
    notes.append(why)
    data["max_length"] = max_length
    model = {"backbone": backbone, **_prototype_model(facts, backbone, notes)}
    config = {"output_dir": f"out/{target.stem}", "task": "single_label", "data": data, "model": model}
    return config, notes


def _prototype_model(facts, backbone: str, notes: list[str]) -> dict:
    """The model keys of a prototype head on this backbone (its pooling, its instruction prefix)."""
    model = {"head": "prototype", "pooling": "mean"}
    if facts is not None and facts.text_prefix:
        model["text_prefix"] = facts.text_prefix
        notes.append(f"text_prefix {facts.text_prefix!r}: {backbone}'s documentation puts it before texts compared "
                     "with each other")
    return model


def _config(layout: Layout, paths: dict, splits: dict, counts: Counter, backbone: str | None,
            target: Path, recipe: str | None = None) -> tuple[dict, list]:
    """The config `init` writes, and what to tell the user about it."""
    labels = sorted(counts)
    notes = [f"{len(labels)} labels in {len(splits['train'])} training rows: "
             + ", ".join(f"{name} {counts[name]}" for name in labels)]
    if max(counts.values()) >= IMBALANCE * min(counts.values()):
        notes.append(f"the labels are imbalanced ({max(counts.values())} vs {min(counts.values())} rows): consider "
                     "-o train.class_weights=auto, and judge the model by macro_f1")
    data = {"train": paths["train"], "dev": paths.get("dev"), "test": paths.get("test")}
    if not layout.header:
        data["header"] = False
    data.update(text_column=layout.text_column, text_pair_column=layout.text_pair_column,
                label_column=layout.label_column, labels=labels)
    if layout.label_delimiter is not None:
        data["label_delimiter"] = layout.label_delimiter
    separator, why = label_tree(labels)
    if why:
        notes.append(why)
    if separator:
        data["label_hierarchy"] = separator
    if backbone is None:
        vocab = vocab_file(target)
        tokens = character_vocab([t for e in splits["train"] for t in (e.text, e.text_pair) if t], min_count=1)
        write_text_atomically(vocab, "\n".join(tokens) + "\n")
        notes.append(f"no --backbone: a small encoder trained from scratch (configs/demo-scratch.yaml's shape), with "
                     f"{vocab} ({len(tokens)} tokens: every character of the training text); a pretrained "
                     "--backbone usually scores much higher")
        tokenizer, limit = _vocab_tokenizer(vocab), 512
    else:
        tokenizer, limit = _backbone_tokenizer(backbone)
    max_length, why = propose_max_length(_lengths(splits["train"], tokenizer), layout.text_pair_column is not None,
                                         limit)
    notes.append(why + ("" if tokenizer is not None else " (counted in characters: the backbone's tokenizer is not "
                                                        "on this machine)"))
    data["max_length"] = max_length
    model = {"backbone": backbone} if backbone is not None else {
        "scratch": {"vocab_file": str(vocab_file(target)), **SCRATCH,
                    "max_position_embeddings": max_length}}
    optimizer = PRETRAINED_OPTIMIZER if backbone is not None else SCRATCH_OPTIMIZER
    facts = encoder_facts(Path(backbone)) if backbone is not None else None
    if facts is not None:  # a local folder: the recipe fits its size
        optimizer = {**optimizer, "learning_rate": learning_rate_for(facts)}
        if not facts.has_pooler:
            model["pooling"] = "mean"
        notes += recipe_notes(facts, backbone, list(paths.values()), optimizer["learning_rate"])
    metric = "micro_f1" if layout.multi_label else "accuracy"
    kind = "pretrained" if backbone is not None else "scratch"
    fewest = min(counts.values())
    if recipe == "few_shot" and (layout.multi_label or layout.text_pair_column):
        raise UserError("--recipe few_shot gives one label per single text: this data has "
                        + ("sets of labels" if layout.multi_label else "text pairs"))
    if recipe == "few_shot" or (recipe is None and kind == "pretrained" and fewest <= FEW_SHOT_ROWS
                                and not layout.multi_label and not layout.text_pair_column):
        model.update(_prototype_model(facts, backbone, notes))
        if data.pop("label_hierarchy", None):
            notes.append("the few-shot recipe's prototype head reads the paths as flat names (no tree yet)")
        train = {**FEW_SHOT_TRAIN, "evaluation": {"metric": metric}}
        notes = [note for note in notes if not note.startswith("learning rate")]  # the recipe's own rate
        why = "--recipe few_shot" if recipe else f"the smallest class has {fewest} rows (<= {FEW_SHOT_ROWS})"
        notes.append(f"few-shot recipe ({why}): contrastive tuning on pairs of the training rows at learning rate "
                     f"{FEW_SHOT_TRAIN['optimizer']['learning_rate']:g}, each class's prototype their mean, as SetFit "
                     "does (--recipe fine_tune for plain fine-tuning)")
    else:
        epochs, batch_size, why = _schedule(len(splits["train"]), kind)
        notes.append(why)
        train = {"epochs": epochs, "batch_size": batch_size, "optimizer": optimizer, "evaluation": {"metric": metric}}
    config = {"output_dir": f"out/{target.stem}", "task": "multi_label" if layout.multi_label else "single_label",
              "data": data, "model": model, "train": train}
    return config, notes


def label_tree(labels: list[str]) -> tuple[str | None, str | None]:
    """(the separator of labels written as paths of a tree, or None; what to tell the user). Paths when two labels
    or more hold "/" and some parent has two children."""
    paths = [label for label in labels if PATH_SEPARATOR in label]
    parents = Counter(label.rsplit(PATH_SEPARATOR, 1)[0] for label in paths)
    if len(paths) < 2 or max(parents.values()) < 2:
        return None, None
    try:
        tree = Hierarchy(tuple(labels), PATH_SEPARATOR)
    except UserError as exc:
        return None, f"the labels look like paths of a tree, but {exc}; read as flat names"
    return PATH_SEPARATOR, (f"the labels are paths of a tree ({paths[0]}: {tree.depth} levels, "
                            f"{len(tree.names[0])} at the top): data.label_hierarchy {PATH_SEPARATOR!r} scores each "
                            "level and answers the parent when the leaf is unsure (-o data.label_hierarchy=null "
                            "reads them as flat names)")


def _schedule(rows: int, kind: str) -> tuple[int, int, str]:
    """(epochs, batch size, why): 3 epochs of 32 on a corpus of thousands; on a small one, smaller batches and more
    epochs, so that the run still takes TARGET_STEPS optimizer steps."""
    batch_size = 32 if rows >= 512 else 16
    low, high = EPOCHS[kind]
    epochs = max(low, min(high, math.ceil(TARGET_STEPS[kind] * batch_size / rows)))
    steps = epochs * math.ceil(rows / batch_size)
    return epochs, batch_size, (f"{epochs} epochs of batch {batch_size}: {steps} optimizer steps on {rows} rows "
                                f"(a {kind} model wants about {TARGET_STEPS[kind]} at least)")


def _header(layout: Layout, notes: list[str], target: Path) -> str:
    lines = [f"python -m paddle_ft train -c {target}", "written by paddle_ft init; what it decided and why:",
             *layout.reasons, *notes]
    return "".join(f"# {line}\n" for line in lines)


def _lengths(examples, tokenizer) -> list[int]:
    """Tokens of each text (pair), [CLS] and [SEP] aside; characters where no tokenizer is at hand."""
    if tokenizer is None:
        return [len(e.text) + len(e.text_pair or "") for e in examples]
    texts, pairs = [e.text for e in examples], [e.text_pair for e in examples]
    encoded = tokenizer(texts, text_pair=pairs if pairs[0] is not None else None, max_length=None, truncation=False)
    pair = pairs[0] is not None
    # the specials around the text(s): [CLS] [SEP]; a pair 3 (WordPiece) or 4 (XLM-R's <s> A </s></s> B </s>)
    frame = sum(map(len, tokenizer.pair_frame()[:3])) if pair and hasattr(tokenizer, "pair_frame") else 3 if pair else 2
    return [len(ids) - frame for ids in encoded["input_ids"]]


def vocab_file(target: Path) -> Path:
    """Where the vocabulary of a scratch encoder goes: beside the config, named after it."""
    return target.with_name(f"{target.stem}-vocab.txt")


def _vocab_tokenizer(vocab: Path):
    from paddlenlp.transformers import BertTokenizer

    return fastest(BertTokenizer(str(vocab)))


def _backbone_tokenizer(backbone: str):
    """The backbone's tokenizer and its longest input, where the backbone is a folder here; else (None, 512)."""
    folder = Path(backbone)
    if not folder.is_dir():
        return None, 512
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return load_tokenizer(folder), positions_in_config(config)
    except (OSError, ValueError, UserError) as exc:
        raise UserError(f"--backbone {backbone}: its tokenizer or config.json cannot be read ({exc}); give a "
                        "PaddleNLP or Hugging Face model folder") from None
