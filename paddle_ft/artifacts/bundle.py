"""A saved model folder (`OUT/best`): the one module that writes and reads it.

The folder is PaddleNLP-shaped so other tools can read it: `config.json` (encoder config),
`model_state.pdparams` (encoder + head, float32), the tokenizer files, `label_map.json`, and
`paddle_ft.json` (`meta.ModelMeta`). Training writes it through `save_bundle`; eval, export and the next
fine-tune read it through `load_bundle`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import paddle

from paddle_ft.artifacts.meta import MODEL_META, ModelMeta, read_model_meta, write_model_meta
from paddle_ft.data.labels import LabelMap
from paddle_ft.errors import UserError, first_line
from paddle_ft.io import atomic_directory
from paddle_ft.model import BERTForTextClassification, float32_state, in_dtypes_of

MODEL_STATE = "model_state.pdparams"
BUNDLE_FILES = (MODEL_STATE, MODEL_META)


@dataclass
class Bundle:
    model: BERTForTextClassification
    """In eval mode, float32."""
    tokenizer: object
    """The PaddleNLP tokenizer saved with the model (callers wrap it with `data.tokenizer.fastest`)."""
    meta: ModelMeta

    @property
    def label_map(self) -> LabelMap:
        return LabelMap(self.meta.labels)


def save_bundle(directory: Path, model: BERTForTextClassification, tokenizer, meta: ModelMeta) -> None:
    """Write the whole folder atomically: a reader sees the previous one or this one, never a mix."""
    if model.classifier.weight.shape[1] != meta.num_classes:
        raise ValueError(f"the head has {model.classifier.weight.shape[1]} classes, the meta {meta.num_classes}")
    with atomic_directory(directory) as tmp:
        config = model.encoder.config
        config.architectures = [type(model.encoder).__name__]  # lets AutoModel.from_config pick the class
        config.save_pretrained(str(tmp))
        paddle.save(float32_state(model), str(tmp / MODEL_STATE))
        tokenizer.save_pretrained(str(tmp))
        LabelMap(meta.labels).save(tmp)
        write_model_meta(meta, tmp)  # last, as it marks the folder as a model


def load_bundle(directory: str | Path, with_tokenizer: bool = True) -> Bundle:
    """The model (eval mode), tokenizer and metadata of a folder `save_bundle` wrote."""
    from paddlenlp.transformers import AutoConfig, AutoModel, AutoTokenizer

    directory = Path(directory)
    meta = read_model_meta(directory)
    try:
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(str(directory)))
        tokenizer = AutoTokenizer.from_pretrained(str(directory)) if with_tokenizer else None
    except Exception as exc:  # PaddleNLP raises many kinds for a missing or broken config / vocab
        raise UserError(f"{directory}: the encoder config or tokenizer cannot be loaded ({first_line(exc)}); the "
                        "folder is damaged: train the model again") from None
    model = BERTForTextClassification(encoder, meta.num_classes, meta.dropout, meta.pooling)
    load_weights(model, directory)
    model.eval()
    return Bundle(model, tokenizer, meta)


def load_weights(model: BERTForTextClassification, directory: Path) -> None:
    """The folder's weights into `model`, cast to its dtypes (the model may be float16 under AMP O2)."""
    path = Path(directory) / MODEL_STATE
    state = read_weights(directory)
    if {name: list(t.shape) for name, t in state.items()} != \
            {name: list(t.shape) for name, t in model.state_dict().items()}:
        raise UserError(f"{path} does not fit the model its config.json describes; the folder is damaged: train "
                        "the model again")
    model.set_state_dict(in_dtypes_of(model, state))


def read_weights(directory: Path) -> dict:
    """The folder's weights as saved: {name: float32 tensor}."""
    path = Path(directory) / MODEL_STATE
    try:
        return paddle.load(str(path))
    except Exception as exc:  # a truncated or foreign file
        raise UserError(f"{path} cannot be read ({first_line(exc)}); the folder is damaged: train the model "
                        "again") from None
