"""Hugging Face checkpoint folders (BERT, RoBERTa, ERNIE) -> PaddleNLP encoder folders.

A Hugging Face folder holds `config.json`, `model.safetensors` or `pytorch_model.bin`, and `vocab.txt`. The
conversion renames the weights to PaddleNLP's layout (`encoder.layer.3.attention.self.query` ->
`encoder.layers.3.self_attn.q_proj`), transposes the linear layers (torch keeps [out, in], Paddle [in, out]),
keeps the architecture fields of the config and writes the tokenizer as PaddleNLP reads it. safetensors is read
here (a JSON header and raw little-endian arrays; bfloat16 too, which numpy lacks), so it needs no torch;
`pytorch_model.bin` is a pickle of torch tensors and is read by torch in a child process, never beside Paddle.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from paddle_ft.errors import UserError
from paddle_ft.io import atomic_directory
from paddle_ft.models.state_file import save_state
from paddle_ft.tokenization import load_tokenizer

SAFETENSORS, TORCH_BIN = "model.safetensors", "pytorch_model.bin"
# PaddleNLP's name for a model's weights, in every folder paddle_ft writes them to: an encoder folder (convert, trim),
# best/ (artifacts.bundle) and a checkpoint (engine.checkpoint); spelt here only
PADDLE_WEIGHTS = "model_state.pdparams"
# Hugging Face model_type -> the PaddleNLP encoder class and tokenizer class that read the same checkpoint
FAMILIES = {"bert": ("BertModel", "BertTokenizer"), "roberta": ("RobertaModel", "RobertaChineseTokenizer"),
            "ernie": ("ErnieModel", "ErnieTokenizer")}
CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range", "pad_token_id", "layer_norm_eps",
               "use_task_id", "task_type_vocab_size")  # the last two: ERNIE 3.0's task embeddings
CONVERSION_INFO = "paddle_ft_conversion.json"
_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "U8": np.uint8, "BF16": np.uint16}

# (Hugging Face name without the model prefix, PaddleNLP name, transposed)
_RULES = [(re.compile(pattern), replacement, transpose) for pattern, replacement, transpose in [
    (r"^embeddings\.(word|position|token_type|task_type)_embeddings\.weight$", r"embeddings.\1_embeddings.weight",
     False),
    (r"^embeddings\.LayerNorm\.(weight|gamma)$", "embeddings.layer_norm.weight", False),
    (r"^embeddings\.LayerNorm\.(bias|beta)$", "embeddings.layer_norm.bias", False),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.(q|k|v)\w*\.(weight|bias)$", r"encoder.layers.\1.self_attn.\2_proj.\3",
     None),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)$", r"encoder.layers.\1.self_attn.out_proj.\2",
     None),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|gamma)$", r"encoder.layers.\1.norm1.weight",
     False),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(bias|beta)$", r"encoder.layers.\1.norm1.bias", False),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)$", r"encoder.layers.\1.linear1.\2", None),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)$", r"encoder.layers.\1.linear2.\2", None),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|gamma)$", r"encoder.layers.\1.norm2.weight", False),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.(bias|beta)$", r"encoder.layers.\1.norm2.bias", False),
    (r"^pooler\.dense\.(weight|bias)$", r"pooler.dense.\1", None),
]]


def is_hf_folder(folder: Path) -> bool:
    """A folder of Hugging Face weights (a PaddleNLP folder has model_state.pdparams, or safetensors it marked)."""
    if not (folder / "config.json").is_file() or (folder / PADDLE_WEIGHTS).is_file():
        return False
    if (folder / TORCH_BIN).is_file():
        return True
    return (folder / SAFETENSORS).is_file() and _safetensors_header(folder / SAFETENSORS)[1].get("format") != "pd"


def paddle_name(hf_name: str, prefix: str) -> tuple[str | None, bool]:
    """(PaddleNLP name, transpose?) of a Hugging Face weight; None for what the encoder does not hold (the
    pretraining heads `cls.*`, `lm_head.*`, buffers such as `position_ids`)."""
    name = hf_name[len(prefix) + 1:] if hf_name.startswith(prefix + ".") else hf_name
    for pattern, replacement, transpose in _RULES:
        if pattern.match(name):
            # None: a linear layer, whose weight is transposed and whose bias is not
            return pattern.sub(replacement, name), name.endswith("weight") if transpose is None else transpose
    return None, False


def cached_conversion(source: Path, cache_root: Path, log) -> Path:
    """The PaddleNLP folder of the Hugging Face folder `source`, converted once per content (the cache key
    hashes its config, weights and vocabulary)."""
    target = cache_root / f"{source.name}-{_content_hash(source)}"
    if not (target / CONVERSION_INFO).is_file():
        report = convert_hf_folder(source, target)
        log(f"converted the Hugging Face checkpoint {source} to PaddleNLP: {report['converted']} tensors into "
            f"{target}" + (f" (left out: {', '.join(report['left_out'][:5])})" if report["left_out"] else ""))
    return target


def convert_hf_folder(source: Path, output: Path) -> dict:
    """Write the PaddleNLP folder of `source` into `output` (atomically); returns what was converted."""
    import paddle

    config = _read_config(source)
    family = config["model_type"]
    encoder_class, tokenizer_class = FAMILIES[family]
    state, left_out = {}, []
    for name, array in _read_weights(source).items():
        target, transpose = paddle_name(name, family)
        if target is None:
            left_out.append(name)
        else:
            state[target] = paddle.to_tensor(np.ascontiguousarray(array.T if transpose else array))
    tokenizer = _tokenizer(source, tokenizer_class)
    paddle_config = {key: config[key] for key in CONFIG_KEYS if key in config}
    # PaddleNLP masks the positions that hold pad_token_id: the tokenizer's padding id, whatever config.json says
    # (multilingual-e5's says 0, which is XLM-R's <s>: every text's first token would be masked)
    paddle_config.update(architectures=[encoder_class], model_type=family, pad_token_id=tokenizer.pad_token_id)
    report = {"source": str(source), "family": family, "converted": len(state), "left_out": left_out}
    with atomic_directory(output) as tmp:
        (tmp / "config.json").write_text(json.dumps(paddle_config, indent=2), encoding="utf-8")
        save_state(state, tmp / PADDLE_WEIGHTS)
        tokenizer.save_pretrained(str(tmp))
        (tmp / CONVERSION_INFO).write_text(json.dumps(report, indent=2), encoding="utf-8")  # last: it is complete
    return report


def _read_config(source: Path) -> dict:
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"{source / 'config.json'} is not a readable JSON file; is {source} a Hugging Face "
                        "checkpoint folder?") from None
    family = config.get("model_type")
    if family not in FAMILIES:
        raise UserError(f"{source / 'config.json'}: model_type {family!r} cannot be converted; paddle_ft reads "
                        f"Hugging Face {', '.join(FAMILIES)} checkpoints")
    return config


def _tokenizer(source: Path, class_name: str):
    """The folder's tokenizer: a SentencePiece tokenizer.json as it is, a WordPiece vocab.txt in PaddleNLP's class."""
    import paddlenlp.transformers as transformers

    vocab = source / "vocab.txt"
    if not vocab.is_file():  # a SentencePiece tokenizer.json, or load_tokenizer's one line on what is missing
        return load_tokenizer(source)
    try:
        settings = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        settings = {}
    return getattr(transformers, class_name)(str(vocab), do_lower_case=settings.get("do_lower_case", True))


def _read_weights(source: Path) -> dict[str, np.ndarray]:
    if (source / SAFETENSORS).is_file():
        return read_safetensors(source / SAFETENSORS)
    return _read_torch_bin(source / TORCH_BIN)


def _safetensors_header(path: Path) -> tuple[int, dict, dict]:
    """(header size, metadata, tensor entries) of a safetensors file."""
    try:
        with path.open("rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
    except (OSError, ValueError, struct.error):
        raise UserError(f"{path} is not a safetensors file (its header cannot be read); the download is "
                        "incomplete or the file is something else") from None
    return size, header.pop("__metadata__", None) or {}, header


def safetensors_names(path: Path) -> list[str]:
    """The tensor names of a safetensors file (its header only is read)."""
    return list(_safetensors_header(path)[2])


def safetensors_entries(path: Path) -> dict[str, dict]:
    """{name: {"dtype", "shape", "data_offsets"}} of a safetensors file's tensors (its header only is read)."""
    return _safetensors_header(path)[2]


def safetensors_header_size(path: Path) -> int:
    return _safetensors_header(path)[0]


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a numpy array (bfloat16 widened to float32)."""
    size, _, entries = _safetensors_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    arrays = {}
    for name, entry in entries.items():
        if entry["dtype"] not in _DTYPES:
            raise UserError(f"{path}: tensor {name} has dtype {entry['dtype']}, which paddle_ft cannot read")
        start, end = entry["data_offsets"]
        array = np.frombuffer(data[start:end].tobytes(), dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        if entry["dtype"] == "BF16":  # the upper half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        arrays[name] = array.astype(np.float32) if array.dtype in (np.float16, np.float64) else array
    return arrays


_TORCH_READER = """
import sys, numpy, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
numpy.savez(sys.argv[2], **{k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()})
"""


def _read_torch_bin(path: Path) -> dict[str, np.ndarray]:
    """torch reads its own pickle, in a child process (torch and Paddle never share one): this interpreter
    (pip install paddle_ft[torch]) or the one PADDLE_FT_TORCH_PYTHON names."""
    python = os.environ.get("PADDLE_FT_TORCH_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([python, "-c", _TORCH_READER, str(path), f"{tmp}/weights.npz"],
                              capture_output=True, text=True)
        if "No module named 'torch'" in done.stderr:
            raise UserError(f"{path} is a torch pickle, and torch is not installed: pip install torch==2.13.0 (the "
                            "CPU build; or point PADDLE_FT_TORCH_PYTHON to a Python that has torch), or save the "
                            "checkpoint as model.safetensors")
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            raise UserError(f"{path} cannot be read by torch ({last[:200]}); the file is damaged or incomplete")
        with np.load(f"{tmp}/weights.npz") as loaded:
            return {name: loaded[name] for name in loaded.files}


def _content_hash(source: Path) -> str:
    digest = hashlib.sha256()
    for name in ("config.json", SAFETENSORS, TORCH_BIN, "vocab.txt", "tokenizer_config.json", "tokenizer.json",
                 "special_tokens_map.json"):
        if (source / name).is_file():
            digest.update(name.encode())
            with (source / name).open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:16]
