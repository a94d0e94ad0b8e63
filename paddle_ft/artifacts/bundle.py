"""A saved model folder (`OUT/best`): the one module that writes and reads it.

The folder is PaddleNLP's sequence-classification layout, so PaddleNLP reads it as its own:
`config.json` (the encoder's config with `architectures`, `num_classes`, `id2label` and `label2id`),
`model_state.pdparams` (float32; the encoder's weights under PaddleNLP's prefix, `bert.` / `ernie.` / `roberta.`,
and the head as `classifier.*`), the tokenizer files; beside them `label_map.json` and `paddle_ft.json`
(`meta.ModelMeta`); once the run has scored it, `MODEL_CARD.md` and `manifest.json` (every file's sha256, the
data files' sha256 and rows, the resolved config, the seed, the versions, the scores with bootstrap intervals).
Where PaddleNLP has a class that computes what paddle_ft's model does (a BERT or ERNIE encoder,
pooler pooling), `architectures` names it (`BertForSequenceClassification`, `ErnieForSequenceClassification`) and
`AutoModelForSequenceClassification.from_pretrained(best)` loads every weight and gives paddle_ft's logits;
otherwise it names the encoder class, which `AutoModel.from_pretrained(best)` loads with every encoder weight.
Training writes it through `save_bundle`; eval, export, distillation and the next fine-tune read it through
`load_bundle` (or, as a backbone, `backbone.load_encoder`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import paddle

from paddle_ft import runtime
from paddle_ft.artifacts.export_folder import EXPORT_INFO
from paddle_ft.artifacts.manifest import versions, write_manifest
from paddle_ft.artifacts.meta import MODEL_META, ModelMeta, is_model_folder, read_model_meta, write_model_meta
from paddle_ft.artifacts.model_card import MODEL_CARD, model_card
from paddle_ft.data.labels import LabelMap
from paddle_ft.errors import UserError, first_line
from paddle_ft.io import atomic_directory, write_text_atomically
from paddle_ft.models.convert import PADDLE_WEIGHTS
from paddle_ft.models.networks import BERTForTextClassification, float32_state, in_dtypes_of
from paddle_ft.models.state_file import save_state
from paddle_ft.tokenization import load_tokenizer

MODEL_STATE = PADDLE_WEIGHTS  # best/'s weights, under PaddleNLP's name
BUNDLE_FILES = (MODEL_STATE, MODEL_META)
# the encoders whose PaddleNLP sequence classifier is paddle_ft's model with pooler pooling: pooled [CLS] output,
# dropout, one linear layer named `classifier` (RoBERTa's has a two-layer head on the first token instead)
PADDLENLP_CLASSIFIERS = {"BertModel": "BertForSequenceClassification",
                         "ErnieModel": "ErnieForSequenceClassification"}


@dataclass
class Bundle:
    model: BERTForTextClassification
    """In eval mode, float32."""
    tokenizer: object
    """The tokenizer saved with the model, in its fast form (`tokenization.load_tokenizer`)."""
    meta: ModelMeta

    @property
    def label_map(self) -> LabelMap:
        return LabelMap(self.meta.labels)


def save_bundle(directory: Path, model: BERTForTextClassification, tokenizer, meta: ModelMeta) -> None:
    """Write the whole folder atomically: a reader sees the previous one or this one, never a mix."""
    if model.classifier.weight.shape[1] != meta.num_classes:
        raise ValueError(f"the head has {model.classifier.weight.shape[1]} classes, the meta {meta.num_classes}")
    with atomic_directory(directory) as tmp:
        paddlenlp_config(model, meta).save_pretrained(str(tmp))
        save_state(_as_paddlenlp_names(float32_state(model), model.encoder.base_model_prefix), tmp / MODEL_STATE)
        tokenizer.save_pretrained(str(tmp))
        LabelMap(meta.labels).save(tmp)
        write_model_meta(meta, tmp)  # last, as it marks the folder as a model


def seal_bundle(directory: Path, name: str, training: dict) -> None:
    """`MODEL_CARD.md` and `manifest.json` of a saved model, once the run has scored it: `training` holds its
    `manifest.TRAINING_KEYS` (seed, resolved config, data files, metrics)."""
    provenance = {"kind": "model", "versions": versions(), **training}
    write_text_atomically(directory / MODEL_CARD, model_card(name, read_model_meta(directory), provenance))
    write_manifest(directory, provenance)


def paddlenlp_config(model: BERTForTextClassification, meta: ModelMeta):
    """The encoder's config as PaddleNLP's sequence classifier of this model reads it (a copy: the live encoder's
    config is left as it is)."""
    config = copy.deepcopy(model.encoder.config)
    encoder_class = type(model.encoder).__name__
    task_class = PADDLENLP_CLASSIFIERS.get(encoder_class) if model.pooling == "pooler" else None
    config.architectures = [task_class or encoder_class]  # lets AutoModel(ForSequenceClassification) pick the class
    config.num_labels = meta.num_classes
    config.id2label = dict(enumerate(meta.labels))
    config.label2id = {name: i for i, name in enumerate(meta.labels)}
    config.classifier_dropout = meta.dropout
    return config


def _as_paddlenlp_names(state: dict, prefix: str) -> dict:
    """`encoder.x` -> `bert.x` (PaddleNLP's name for the encoder inside a task model); the head keeps its names."""
    return {f"{prefix}.{name[len('encoder.'):]}" if name.startswith("encoder.") else name: tensor
            for name, tensor in state.items()}


def _as_own_names(state: dict, prefix: str) -> dict:
    return {f"encoder.{name[len(prefix) + 1:]}" if name.startswith(prefix + ".") else name: tensor
            for name, tensor in state.items()}


def check_trained_model_folder(folder: Path, needs: str) -> None:
    """`--model` of a command that only a training run's best/ serves (an export holds no gradients or vectors):
    one line when it is an export (`needs`: what the command reads that an export lacks) or no model folder."""
    if (folder / EXPORT_INFO).is_file():
        raise UserError(f"--model {folder} is an export; give the training run's best/ folder, {needs}")
    if not is_model_folder(folder):
        raise UserError(f"--model {folder} is not a model folder a training run wrote (OUT/best)")


def load_bundle(directory: str | Path, with_tokenizer: bool = True) -> Bundle:
    """The model (eval mode), tokenizer and metadata of a folder `save_bundle` wrote."""
    from paddlenlp.transformers import AutoConfig, AutoModel

    directory = Path(directory)
    meta = read_model_meta(directory)
    tokenizer = load_tokenizer(directory, meta.text_prefix) if with_tokenizer else None
    try:
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(str(directory)))
    except Exception as exc:  # PaddleNLP raises many kinds for a missing or broken config / vocab
        raise UserError(f"{directory}: the encoder config or tokenizer cannot be loaded ({first_line(exc)}); the "
                        "folder is damaged: train the model again") from None
    model = BERTForTextClassification(encoder, meta.num_classes, meta.dropout, meta.pooling, meta.head)
    load_weights(model, directory)
    model.eval()
    # what loads a bundle runs it (eval, select-texts, explain, add-class): on every core, not Paddle's default of one
    # math thread, which left them at half the speed on 2 cores
    runtime.apply_cpu_settings()
    return Bundle(model, tokenizer, meta)


def load_weights(model: BERTForTextClassification, directory: Path) -> None:
    """The folder's weights into `model`, cast to its dtypes (the model may be float16 under AMP O2)."""
    path = Path(directory) / MODEL_STATE
    state = _as_own_names(read_weights(directory), model.encoder.base_model_prefix)
    if {name: list(t.shape) for name, t in state.items()} != \
            {name: list(t.shape) for name, t in model.state_dict().items()}:
        raise UserError(f"{path} does not fit the model its config.json describes (damaged, or written by another "
                        "paddle_ft version): train the model again")
    model.set_state_dict(in_dtypes_of(model, state))


def read_weights(directory: Path) -> dict:
    """The folder's weights as saved: {PaddleNLP's name: float32 tensor}."""
    path = Path(directory) / MODEL_STATE
    try:
        return paddle.load(str(path))
    except Exception as exc:  # a truncated or foreign file
        raise UserError(f"{path} cannot be read ({first_line(exc)}); the folder is damaged: train the model "
                        "again") from None
