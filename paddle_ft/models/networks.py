"""`BERTForTextClassification`: a PaddleNLP encoder, its pooled vector, dropout and a head: a linear layer, or
`PrototypeHead` (a prototype per class in the encoder's embedding space: zero-shot, few-shot, classes added later).

How a trained one is saved and read back is `bundle`'s job.
"""
from __future__ import annotations

import math

import numpy as np
import paddle
from paddle import nn

from paddle_ft.models.packing import packed, packs_texts


class PrototypeHead(nn.Layer):
    """Logits = scale * cosine(text vector, class prototype) + bias: column c of `weight` is class c's prototype
    (any length; only its direction counts), `log_scale` the learned log of the scale (a temperature's inverse),
    `bias` a class's offset (learnt with cross-entropy, zero for prototypes that are means, set by add-class so
    that a new class answers only where it is sure). Weight and bias have a linear head's shapes, so a model
    folder holds either the same way."""

    INITIAL_SCALE = 20.0  # cosines of a sentence encoder differ by a few hundredths; x20 makes that a logit or so

    def __init__(self, hidden_size: int, num_classes: int):
        super().__init__()
        self.weight = self.create_parameter([hidden_size, num_classes],
                                            default_initializer=nn.initializer.Normal(mean=0.0, std=0.02))
        self.log_scale = self.create_parameter([1], default_initializer=nn.initializer.Constant(
            math.log(self.INITIAL_SCALE)))
        self.bias = self.create_parameter([num_classes], is_bias=True,
                                          default_initializer=nn.initializer.Constant(0.0))

    def forward(self, pooled):
        # pooled: [batch, hidden] -> logits [batch, classes]
        prototypes = nn.functional.normalize(self.weight, axis=0)
        cosines = paddle.matmul(nn.functional.normalize(pooled, axis=-1), prototypes)
        return cosines * paddle.exp(self.log_scale) + self.bias

    def set_prototypes(self, vectors: np.ndarray) -> None:
        """vectors: [classes, hidden], one per class (normalised here)."""
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.weight.set_value(vectors.T.astype(self.weight.numpy().dtype))


class BERTForTextClassification(nn.Layer):
    def __init__(self, encoder: nn.Layer, num_classes: int, dropout: float = 0.1, pooling: str = "pooler",
                 head: str = "linear"):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        if pooling != "pooler":  # unused: no gradient, no optimizer state
            for parameter in encoder.pooler.parameters():
                parameter.stop_gradient = True
        self.dropout = nn.Dropout(dropout)
        hidden_size = encoder.config.hidden_size
        self.classifier = PrototypeHead(hidden_size, num_classes) if head == "prototype" else nn.Linear(
            hidden_size, num_classes,
            weight_attr=paddle.ParamAttr(initializer=nn.initializer.Normal(mean=0.0, std=0.02)),
            bias_attr=paddle.ParamAttr(initializer=nn.initializer.Constant(0.0)))

    @property
    def head(self) -> str:
        return "prototype" if isinstance(self.classifier, PrototypeHead) else "linear"

    def forward(self, input_ids, token_type_ids=None, vectors: bool = False, position_ids=None, offsets=None):
        """Logits [batch, num_classes]; with `vectors`, the texts' vectors (`embed`): a call through the model, so
        that DataParallel sees it. With `offsets`, the batch is packed (data.features.pack_batch): one row of the
        texts side by side, `position_ids` restarting at each, and [texts, num_classes] logits."""
        pooled = self.embed(input_ids, token_type_ids) if offsets is None else \
            self._embed_packed(input_ids, token_type_ids, position_ids, offsets)
        if vectors:
            return pooled
        if not paddle.in_dynamic_mode() or not paddle.amp.is_autocast_enabled():  # export traces float32
            return self.classifier(self.dropout(pooled))
        # under AMP the head runs in float32 outside the autocast (O2 keeps its weights float32: `float32_layers`):
        # a prototype head's normalisation and learned scale, and a linear head's logits, are not fp16 matters
        with paddle.amp.auto_cast(enable=False):
            return self.classifier(self.dropout(pooled.astype("float32")))

    def float32_layers(self) -> list[nn.Layer]:
        """What AMP O2 keeps in float32 (engine/amp.py): the head, and the embeddings, whose lookup Paddle runs in
        float32 anyway (a float16 table would be cast back every forward: ~1 GB a step for e5's 250k-row one)."""
        embeddings = [layer for layer in self.encoder.sublayers() if isinstance(layer, nn.Embedding)]
        return [self.classifier, *embeddings]

    def _embed_packed(self, input_ids, token_type_ids, position_ids, offsets):
        """embed() of packed texts: [texts, hidden], each text's vector as it gets in a batch of its own (the
        encoder's layers keep attention inside each text: models/packing.py)."""
        layers = [layer for layer in self.encoder.sublayers() if isinstance(layer, nn.TransformerEncoderLayer)]
        if not layers or not all(packs_texts(layer) for layer in layers):
            raise RuntimeError("packed texts need the encoder's layers on the fused training kernels")
        with packed(offsets):
            sequence = self.encoder(input_ids, token_type_ids=token_type_ids, position_ids=position_ids)[0][0]
        starts = offsets[:-1]
        if self.pooling == "cls":
            return paddle.gather(sequence, starts)
        if self.pooling == "mean":  # a [texts, tokens] matrix of 1 / length over each text's tokens
            token = paddle.arange(sequence.shape[0], dtype="int64").unsqueeze(0)
            inside = ((token >= starts.unsqueeze(1)) & (token < offsets[1:].unsqueeze(1))).astype(sequence.dtype)
            return paddle.matmul(inside / inside.sum(axis=1, keepdim=True), sequence)
        return self.encoder.pooler(paddle.gather(sequence, starts).unsqueeze(1))

    def embed(self, input_ids, token_type_ids=None):
        """The text's vector the head reads, before dropout: [batch, hidden]."""
        # input_ids, token_type_ids: [batch, seq] int64. The encoder masks positions equal to its
        # pad_token_id, so no attention mask is passed (and none needs exporting).
        # sequence: [batch, seq, hidden]; pooled: [batch, hidden]
        sequence, pooled = self.encoder(input_ids, token_type_ids=token_type_ids)[:2]
        if self.pooling == "cls":
            return sequence[:, 0]
        if self.pooling == "mean":  # summed in float32: a float16 sum over hundreds of tokens loses their small parts
            sequence = sequence if sequence.dtype == paddle.float32 else sequence.astype("float32")
            mask = (input_ids != self.encoder.config.pad_token_id).astype(sequence.dtype).unsqueeze(-1)  # [b, s, 1]
            return (sequence * mask).sum(axis=1) / mask.sum(axis=1)
        return pooled


class MaskedLanguageModel(nn.Layer):
    """An encoder and BERT's masked-LM head (dense + GELU + LayerNorm, decoder tied to the word embeddings),
    computed on the masked positions only: at a 15% masking rate the vocabulary projection of every position
    would be most of the step's cost."""

    def __init__(self, encoder: nn.Layer):
        super().__init__()
        self.encoder = encoder
        hidden, config = encoder.config.hidden_size, encoder.config
        # named, not numbered: "layer_norm" keeps the normalisation weight out of weight decay
        self.head = nn.Sequential(
            ("transform", nn.Linear(hidden, hidden)), ("activation", nn.GELU()),
            ("layer_norm", nn.LayerNorm(hidden, epsilon=getattr(config, "layer_norm_eps", 1e-12))))
        self.decoder_bias = self.create_parameter([config.vocab_size], is_bias=True,
                                                  default_initializer=nn.initializer.Constant(0.0))

    def forward(self, input_ids, token_type_ids, positions):
        # input_ids, token_type_ids: [batch, seq]; positions: [n] indices into the flattened [batch * seq]
        sequence = self.encoder(input_ids, token_type_ids=token_type_ids)[0]  # [batch, seq, hidden]
        picked = paddle.gather(sequence.reshape([-1, sequence.shape[-1]]), positions)  # [n, hidden]
        words = self.encoder.embeddings.word_embeddings.weight  # [vocab, hidden]
        return paddle.matmul(self.head(picked), words, transpose_y=True) + self.decoder_bias  # [n, vocab]


class ReplacedTokenDetection(nn.Layer):
    """ELECTRA: a small generator (a `MaskedLanguageModel` sharing the embeddings) fills the masked positions
    with plausible tokens, and the encoder that is kept, the discriminator, tells for every token whether it
    was replaced. Learning from every token, not only the masked 15%, is why it learns more per step."""

    def __init__(self, encoder: nn.Layer, generator_encoder: nn.Layer):
        super().__init__()
        self.encoder = encoder
        generator_encoder.embeddings = encoder.embeddings  # shared: the generator's decoder is tied to them too
        self.generator = MaskedLanguageModel(generator_encoder)
        hidden = encoder.config.hidden_size
        self.discriminator_head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, input_ids, token_type_ids, positions, noise):
        """input_ids, token_type_ids: [batch, seq] with the masks; positions: [n] flat masked positions; noise:
        [n, vocab] Gumbel noise for sampling. Returns (generator logits [n, vocab], the ids the discriminator saw
        [batch, seq], its replaced-or-not logit per token [batch, seq]). One call, so that DataParallel sees
        the whole step."""
        generator_logits = self.generator(input_ids, token_type_ids, positions)
        with paddle.amp.auto_cast(enable=False):  # O2 would run the add in float16, where ties and rounding bias
            sampled = paddle.argmax(generator_logits.detach().astype("float32") + noise, axis=-1)  # Gumbel-max
        shown = paddle.scatter(input_ids.reshape([-1]), positions, sampled).reshape(input_ids.shape)
        sequence = self.encoder(shown, token_type_ids=token_type_ids)[0]  # [batch, seq, hidden]
        return generator_logits, shown, self.discriminator_head(sequence).squeeze(-1)


def scratch_encoder(architecture: str, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int,
                    intermediate_size: int, max_position_embeddings: int, dropout: float,
                    pad_token_id: int = 0) -> nn.Layer:
    """A randomly initialised BERT / ERNIE / RoBERTa encoder of the given shape."""
    from paddlenlp.transformers import BertConfig, BertModel, ErnieConfig, ErnieModel, RobertaConfig, RobertaModel

    config_cls, model_cls = {"bert": (BertConfig, BertModel), "ernie": (ErnieConfig, ErnieModel),
                             "roberta": (RobertaConfig, RobertaModel)}[architecture]
    config = config_cls(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                        num_attention_heads=num_heads, intermediate_size=intermediate_size,
                        max_position_embeddings=max_position_embeddings, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, pad_token_id=pad_token_id)
    return model_cls(config)


def float32_state(layer: nn.Layer) -> dict:
    """Weights in float32 whatever precision training ran in (AMP O2 keeps them in float16/bfloat16): a saved
    model is loaded into a float32 model by eval, export and the next fine-tune."""
    return {name: tensor.astype("float32") if tensor.dtype in (paddle.float16, paddle.bfloat16) else tensor
            for name, tensor in layer.state_dict().items()}


def in_dtypes_of(model: nn.Layer, state: dict) -> dict:
    """`state` with each tensor cast to the dtype of the model's own (an AMP O2 run keeps most weights in
    float16/bfloat16; weights saved in float32 must still load into it, and the other way round)."""
    own = model.state_dict()
    return {name: tensor.astype(own[name].dtype) if tensor.dtype != own[name].dtype else tensor
            for name, tensor in state.items()}
