"""Build the run's objects (tokenizer, data splits, model) from a validated `Config`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paddle_ft.artifacts.meta import ModelMeta
from paddle_ft.config import Config, DataConfig, ModelConfig
from paddle_ft.data.cache import cached_tokenize
from paddle_ft.data.corrections import apply_corrections, read_corrections
from paddle_ft.data.features import Features, Splits
from paddle_ft.data.labels import LabelMap, resolve_labels
from paddle_ft.data.readers import Columns, Example, format_of, read_examples
from paddle_ft.errors import ConfigError, DataError, UserError
from paddle_ft.log import log
from paddle_ft.models import backbone
from paddle_ft.models.hierarchy import Hierarchy, labelled_parents
from paddle_ft.models.networks import BERTForTextClassification, scratch_encoder
from paddle_ft.text import Truncation
from paddle_ft.tokenization import NO_TOKEN, fastest, load_tokenizer, with_text_prefix, without_tokens


@dataclass
class Dataset:
    label_map: LabelMap
    examples: dict[str, list[Example]]
    """Split name ("train", "dev", "test") -> rows, for the splits the config names."""
    paths: dict[str, str] = dataclasses.field(default_factory=dict)
    """Split name -> the file it was read from, to name a row's FILE:LINE."""


def format_of_split(data: DataConfig, path: str) -> str:
    """data.format, or where it is not set the file's own extension (tsv for any other)."""
    return data.format or format_of(path, "tsv")


SKIP_SETTING = "data.on_bad_row=skip"


def read_dataset(data: DataConfig, task: str = "single_label") -> Dataset:
    """Read every configured split; labels come from `data.labels` or from train."""
    columns = Columns.of(data, task == "multi_label")
    examples, given = {}, None if data.labels is None else resolve_labels(data.labels, None)
    if data.train is not None:
        examples["train"], report = read_examples(
            data.train, format_of_split(data, data.train), columns, frozenset(given.names) if given else None,
            data.on_bad_row, SKIP_SETTING)
        log(report.summary())
    label_map = given or resolve_labels(None, [name for e in examples.get("train", []) for name in e.label_names]
                                        or None)
    for split in ("dev", "test"):
        path = getattr(data, split)
        if path is not None:
            examples[split], report = read_examples(path, format_of_split(data, path), columns,
                                                    frozenset(label_map.names), data.on_bad_row, SKIP_SETTING)
            log(report.summary())
    paths = {split: getattr(data, split) for split in examples}
    if data.label_hierarchy is not None:
        _check_hierarchy(label_map, data.label_hierarchy, examples, paths)
    if data.corrections is not None:
        examples = _corrected(examples, paths, data.corrections, columns, label_map)
    return Dataset(label_map, examples, paths)


def _check_hierarchy(label_map: LabelMap, separator: str, examples: dict, paths: dict) -> None:
    """The labels form a tree of more than one level; a label that is also a parent names its first row."""
    try:
        hierarchy = Hierarchy(label_map.names, separator)
    except UserError as exc:
        parents = labelled_parents(label_map.names, separator)
        row = next(((split, e) for split, rows in examples.items() for e in rows
                    if parents and parents[0] in e.label_names), None)
        if row is None:
            raise ConfigError("data.label_hierarchy", str(exc)) from None
        split, example = row
        if split != "train":  # a new leaf (电子/其他) there would be a label train never shows the model
            leaves = [name for name in label_map.names if name.startswith(parents[0] + separator)]
            raise DataError(paths[split], example.line, f"the label {parents[0]!r} is the parent of {leaves[0]!r}: a "
                            f"{split} row's label must be a leaf train has; label it as one of "
                            f"{', '.join(leaves[:5])}{', ...' if len(leaves) > 5 else ''}, or remove the row") \
                from None
        raise DataError(paths[split], example.line, str(exc)) from None
    if hierarchy.depth == 1:
        raise ConfigError("data.label_hierarchy", f"is {separator!r}, but no label name holds it "
                          f"({label_map.names[0]!r}, ...): write the labels as paths (电子{separator}手机) or set it "
                          "to null")


def _corrected(examples: dict, paths: dict, corrections: str, columns: Columns, label_map: LabelMap) -> dict:
    if not Path(corrections).is_file():
        raise ConfigError("data.corrections", f"{corrections} does not exist; give the review file label-issues "
                          "wrote (OUT/review.tsv), or remove the key")
    examples, counts = apply_corrections(examples, paths, read_corrections(corrections, columns,
                                                                           frozenset(label_map.names)))
    log(f"data.corrections: {counts['relabelled']} rows relabelled and {counts['dropped']} dropped, as {corrections} "
        "decides")
    return examples


def build_splits(dataset: Dataset, tokenizer, max_length: int, cache_dir: str | None = None,
                 truncation: Truncation = Truncation()) -> Splits:
    """Token ids of every split, from the feature cache when the same texts were tokenised before."""
    features: dict[str, Features] = {}
    hits = []
    for name, rows in dataset.examples.items():
        for column in ([e.text for e in rows], [e.text_pair for e in rows if e.text_pair is not None]):
            empty = without_tokens(column)
            if empty:  # a row the model would read as [CLS] [SEP] alone
                raise DataError(dataset.paths.get(name, f"the {name} split"), rows[empty[0]].line,
                                f"the text {NO_TOKEN}; fix the row or remove it")
        features[name], hit = cached_tokenize(rows, tokenizer, max_length, dataset.label_map, cache_dir, truncation)
        if hit:
            hits.append(name)
    if hits:
        log(f"token ids of {', '.join(hits)} read from the feature cache {cache_dir}")
    no_rows = Features([], [], np.zeros(0, dtype=np.int64))  # zero-shot: no training file
    return Splits(dataset.label_map.names, tokenizer.pad_token_id, features.get("train", no_rows), features.get("dev"),
                  features.get("test"))


def build_tokenizer(model: ModelConfig):
    """The model's tokenizer (`tokenization.load_tokenizer`: WordPiece or SentencePiece, in its fast form)."""
    from paddlenlp.transformers import BertTokenizer

    if model.backbone is None:
        vocab = Path(model.scratch.vocab_file)
        if not vocab.is_file():
            raise ConfigError("model.scratch.vocab_file", f"{vocab} not found; build it with "
                              "tools/prepare_demo_data.py or point to a vocab.txt")
        _check_vocab(vocab)
        return with_text_prefix(fastest(BertTokenizer(str(vocab))), model.text_prefix, str(vocab))
    try:
        return load_tokenizer(model.backbone, model.text_prefix)
    except UserError as exc:
        raise ConfigError("model.backbone", f"{exc}; offline, give a local PaddleNLP or Hugging Face model folder, "
                          "or use model.scratch") from None


# a BERT tokenizer cannot encode without these (PaddleNLP would fail later with a KeyError)
REQUIRED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")


def _check_vocab(vocab: Path) -> None:
    try:
        tokens = {line.strip() for line in vocab.read_text(encoding="utf-8").splitlines()}
    except UnicodeDecodeError as exc:
        raise ConfigError("model.scratch.vocab_file", f"{vocab} is not a UTF-8 text file (byte {exc.start}); give a "
                          "vocab.txt with one token per line") from None
    missing = [token for token in REQUIRED_TOKENS if token not in tokens]
    if missing:
        raise ConfigError("model.scratch.vocab_file", f"{vocab} lacks {', '.join(missing)}; give a WordPiece "
                          "vocab.txt with one token per line, special tokens included")


def resolve_backbone(model: ModelConfig) -> ModelConfig:
    """`model` with `backbone` as PaddleNLP loads it: a Hugging Face folder becomes its converted copy."""
    if model.backbone is None:
        return model
    return dataclasses.replace(model, backbone=backbone.resolve(model.backbone, model.cache_dir, log))


def build_encoder(model: ModelConfig, tokenizer, max_length: int):
    """(the encoder of a resolved model config, the `LoadReport` of its checkpoint or None for scratch, which
    the caller logs with what it adds on top), checked against the tokenizer and max_length before any
    training: what Paddle would otherwise report as an index error in the middle of the first epoch."""
    report = None
    if model.backbone is None:
        s = model.scratch
        dropout = model.dropout if model.encoder_dropout is None else model.encoder_dropout
        encoder = scratch_encoder(s.architecture, len(tokenizer.vocab), s.hidden_size, s.num_layers, s.num_heads,
                                  s.intermediate_size, s.max_position_embeddings, dropout, tokenizer.pad_token_id)
    else:
        encoder, report = backbone.load_encoder(model.backbone, model.encoder_dropout)
    _check_fits(model, encoder, tokenizer, max_length)
    return encoder, report


def build_model(model: ModelConfig, num_classes: int, tokenizer, max_length: int) -> BERTForTextClassification:
    """The classifier of a resolved model config: its encoder, a new head, the frozen parts frozen."""
    encoder, report = build_encoder(model, tokenizer, max_length)
    if report is not None:
        log(report.describe(uses_pooler=model.pooling == "pooler") + "; the classifier head is new")
    if report is not None and report.lacks_pooler and model.pooling == "pooler":
        raise ConfigError("model.pooling", f"is pooler, but {model.backbone} has no pooler weights (a "
                          "sentence-embedding checkpoint?); set model.pooling: cls or mean")
    classifier = BERTForTextClassification(encoder, num_classes, model.dropout, model.pooling, model.head)
    freeze(classifier, model.freeze_embeddings, model.freeze_layers)
    return classifier


def start_at_label_priors(model: BERTForTextClassification, labels: np.ndarray) -> None:
    """A multi-label head's biases start at each label's log-odds in train ([texts, labels] 0/1), so each sigmoid
    starts at its label's frequency, not at 0.5 (Lin et al., 2017, for rare classes). Of thousands of labels, 0.5
    makes the first steps push every label down, and the few positives of each never pull it back up."""
    import paddle

    share = np.clip(labels.mean(axis=0), 0.5 / len(labels), 1 - 0.5 / len(labels))
    model.classifier.bias.set_value(paddle.to_tensor(np.log(share / (1 - share)), dtype=model.classifier.bias.dtype))


def _check_fits(model: ModelConfig, encoder, tokenizer, max_length: int) -> None:
    source = model.backbone or "the scratch encoder"
    usable = backbone.usable_positions(encoder)
    if max_length > usable:
        why = " (RoBERTa numbers positions from pad_token_id + 1)" if usable < encoder.config.max_position_embeddings \
            else ""
        raise ConfigError("data.max_length", f"is {max_length}, but {source} takes at most {usable} tokens{why}; set "
                          f"data.max_length: {usable} or less")
    if len(tokenizer) > encoder.config.vocab_size:
        raise ConfigError("model.backbone", f"the tokenizer of {source} has {len(tokenizer)} tokens but its encoder "
                          f"only {encoder.config.vocab_size} embeddings; the vocabulary and the weights are from "
                          "different models")
    layers = len(encoder.encoder.layers)
    if model.freeze_layers > layers:
        raise ConfigError("model.freeze_layers", f"is {model.freeze_layers}, but {source} has {layers} layers")


def freeze(model: BERTForTextClassification, embeddings: bool, layers: int) -> None:
    """Frozen parameters get no gradient, so AdamW keeps no state for them and never decays them."""
    frozen = ([model.encoder.embeddings] if embeddings else []) + list(model.encoder.encoder.layers[:layers])
    for part in frozen:
        for parameter in part.parameters():
            parameter.stop_gradient = True


def model_meta(config: Config, label_map: LabelMap) -> ModelMeta:
    """What a saved model must remember about its labels and how its data was read (for eval and export)."""
    data = config.data
    return ModelMeta(labels=label_map.names, max_length=data.max_length, text_column=data.text_column,
                     text_pair_column=data.text_pair_column, label_column=data.label_column,
                     format=format_of_split(data, data.train or data.dev or ""), header=data.header,
                     dropout=config.model.dropout, pooling=config.model.pooling, head=config.model.head,
                     text_prefix=config.model.text_prefix, truncation=data.truncation,
                     head_tokens=data.head_tokens, stride=data.stride, window_pooling=data.window_pooling,
                     task=config.task, label_delimiter=data.label_delimiter, allow_no_label=data.allow_no_label,
                     label_hierarchy=data.label_hierarchy,
                     abstain_below=config.train.decision.abstain_below)
