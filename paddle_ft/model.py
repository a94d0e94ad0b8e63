"""`BERTForTextClassification`: a PaddleNLP encoder, its pooled [CLS] vector, dropout and a linear head.

A saved model directory (`OUT/best`) is PaddleNLP-shaped so other tools can read it:
`config.json` (encoder config), `model_state.pdparams` (encoder + head), tokenizer files,
`label_map.json`, and `paddle_ft.json` (head size and how the data was read).
"""
from __future__ import annotations

import json
from pathlib import Path

import paddle
from paddle import nn

MODEL_STATE = "model_state.pdparams"
MODEL_META = "paddle_ft.json"


class BERTForTextClassification(nn.Layer):
    def __init__(self, encoder: nn.Layer, num_classes: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        hidden_size = encoder.config.hidden_size
        self.classifier = nn.Linear(
            hidden_size, num_classes,
            weight_attr=paddle.ParamAttr(initializer=nn.initializer.Normal(mean=0.0, std=0.02)),
            bias_attr=paddle.ParamAttr(initializer=nn.initializer.Constant(0.0)))

    def forward(self, input_ids, token_type_ids=None):
        # input_ids, token_type_ids: [batch, seq] int64. The encoder masks positions equal to its
        # pad_token_id, so no attention mask is passed (and none needs exporting).
        _, pooled = self.encoder(input_ids, token_type_ids=token_type_ids)[:2]  # pooled: [batch, hidden]
        return self.classifier(self.dropout(pooled))  # logits: [batch, num_classes]


def scratch_encoder(architecture: str, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int,
                    intermediate_size: int, max_position_embeddings: int, dropout: float,
                    pad_token_id: int = 0) -> nn.Layer:
    """A randomly initialised BERT / ERNIE / RoBERTa encoder of the given shape."""
    from paddlenlp.transformers import (BertConfig, BertModel, ErnieConfig, ErnieModel, RobertaConfig,
                                        RobertaModel)

    config_cls, model_cls = {"bert": (BertConfig, BertModel), "ernie": (ErnieConfig, ErnieModel),
                             "roberta": (RobertaConfig, RobertaModel)}[architecture]
    config = config_cls(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                        num_attention_heads=num_heads, intermediate_size=intermediate_size,
                        max_position_embeddings=max_position_embeddings, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, pad_token_id=pad_token_id)
    return model_cls(config)


def pretrained_encoder(name_or_dir: str) -> nn.Layer:
    """A PaddleNLP encoder by model name (downloads once) or from a local PaddleNLP directory."""
    from paddlenlp.transformers import AutoModel

    return AutoModel.from_pretrained(name_or_dir)


def save_model(model: BERTForTextClassification, directory: Path, meta: dict) -> None:
    """Write weights, encoder config and `meta` (JSON-able) into `directory` (which must exist)."""
    config = model.encoder.config
    config.architectures = [type(model.encoder).__name__]  # lets AutoModel.from_config pick the class
    config.save_pretrained(str(directory))
    # float32 whatever precision training ran in (AMP O2 keeps weights in float16/bfloat16): a saved model
    # is loaded into a float32 model by eval, export and the next fine-tune
    state = {name: tensor.astype("float32") if tensor.dtype in (paddle.float16, paddle.bfloat16) else tensor
             for name, tensor in model.state_dict().items()}
    paddle.save(state, str(directory / MODEL_STATE))
    meta = {"num_classes": model.classifier.weight.shape[1], **meta}
    (directory / MODEL_META).write_text(json.dumps(meta, ensure_ascii=False, indent=2), encoding="utf-8")


def load_model(directory: str | Path) -> tuple[BERTForTextClassification, dict]:
    """Rebuild a model saved by `save_model`; returns it in eval mode with its meta."""
    from paddlenlp.transformers import AutoConfig, AutoModel

    directory = Path(directory)
    meta = read_model_meta(directory)
    encoder = AutoModel.from_config(AutoConfig.from_pretrained(str(directory)))
    model = BERTForTextClassification(encoder, meta["num_classes"], meta.get("dropout", 0.0))
    model.set_state_dict(paddle.load(str(directory / MODEL_STATE)))
    model.eval()
    return model, meta


def read_model_meta(directory: Path) -> dict:
    from paddle_ft.errors import UserError

    path = directory / MODEL_META
    if not path.is_file():
        raise UserError(f"{directory} is not a paddle_ft model directory (no {MODEL_META}); "
                        "pass the `best/` folder a training run wrote")
    return json.loads(path.read_text(encoding="utf-8"))
