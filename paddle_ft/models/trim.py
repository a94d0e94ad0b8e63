"""A backbone folder cut down to the pieces a corpus uses (`python -m paddle_ft trim-vocab`).

multilingual-e5-small keeps 96M of its 118M parameters in a 250,037-row embedding table; a Chinese corpus reads a few
thousand of those rows. The trimmed folder keeps the specials, every piece the given texts use, the N most probable
pieces besides (by the unigram model's own scores, which are log-probabilities), and the least probable piece (the
unigram model scores an unknown character at the lowest score minus 10: keeping that piece keeps the penalty, so a
text made of kept pieces is split exactly as before). Ids are renumbered in the old order, so the specials keep
theirs; the embedding rows (and any other tensor with a row per piece) follow. The result is a folder of the same
kind, read by paddle_ft, Hugging Face and PaddleNLP alike; `paddle_ft_trim.json` in it records what was kept.
"""
from __future__ import annotations

import errno
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from paddle_ft.errors import UserError
from paddle_ft.io import atomic_directory
from paddle_ft.models.convert import PADDLE_WEIGHTS, SAFETENSORS, is_hf_folder, read_safetensors
from paddle_ft.models.state_file import save_state
from paddle_ft.tokenization import SentencePieceTokenizer, load_tokenizer, tokenizer_kind
from paddle_ft.tokenization.sentencepiece import TOKENIZER_JSON

TRIM_INFO = "paddle_ft_trim.json"


@dataclass(frozen=True)
class TrimReport:
    source: str
    pieces_before: int
    pieces_after: int
    used_by_texts: int
    texts: int
    kept_ids: list[int]
    """The old id of each new id."""
    rows_before: int | None = None
    """Rows of the embedding table before (a model may keep spare rows beyond its pieces: e5-small 35)."""

    def describe(self) -> str:
        rows = f"; its embedding table {self.rows_before:,} -> {self.pieces_after:,} rows" if self.rows_before else ""
        return (f"kept {self.pieces_after:,} of {self.pieces_before:,} pieces ({self.used_by_texts:,} used by the "
                f"{self.texts:,} texts, the rest the most probable and the specials){rows}")


def trimmed_from(folder: str | None) -> TrimReport | None:
    """How a backbone folder was trimmed (its TRIM_INFO), or None for one that was not (or a model name)."""
    info = Path(folder).expanduser() / TRIM_INFO if folder else None
    if info is None or not info.is_file():
        return None
    try:
        return TrimReport(**json.loads(info.read_text(encoding="utf-8")))
    except (ValueError, TypeError):  # a damaged record says nothing of how it was trimmed
        return None


def kept_ids(tokenizer: SentencePieceTokenizer, texts: list[str], keep_top: int,
             scores: np.ndarray) -> tuple[list[int], int]:
    """(the old ids to keep, in order; how many of them the texts use). `scores`: each piece's (`piece_scores`)."""
    used = {i for ids in tokenizer.pieces(texts) for i in ids}
    specials = {tokenizer.vocab[token] for token in tokenizer.all_special_tokens}
    ordinary = [i for i in np.argsort(-scores, kind="stable").tolist() if i not in specials]
    lowest = ordinary[-1:]  # the least probable piece: it fixes the unknown penalty (see the module's docstring)
    return sorted(used | specials | set(ordinary[:keep_top]) | set(lowest)), len(used - specials)


def piece_scores(definition: dict) -> np.ndarray:
    """Each piece's score (log-probability) in a parsed tokenizer.json; a tokenizer of another model is refused."""
    model = definition["model"]
    if model.get("type") != "Unigram":
        raise UserError(f"trim-vocab trims unigram SentencePiece tokenizers; this one is {model.get('type')}")
    return np.array([score for _, score in model["vocab"]], dtype=np.float64)


INSTRUCTIONS = ("query: ", "passage: ")  # multilingual-e5's, bge's and gte's


def trimmed_definition(tokenizer: dict, kept: list[int]) -> str:
    """A parsed tokenizer.json with only the `kept` pieces, renumbered (rewritten in place), as JSON."""
    new_id = {old: new for new, old in enumerate(kept)}
    model = tokenizer["model"]
    model["vocab"] = [model["vocab"][old] for old in kept]
    model["unk_id"] = new_id[model["unk_id"]]
    for token in tokenizer.get("added_tokens") or []:
        token["id"] = new_id[token["id"]]
    _renumber_post_processor(tokenizer.get("post_processor"), new_id)
    return json.dumps(tokenizer, ensure_ascii=False)


def _renumber_post_processor(processor: dict | None, new_id: dict[int, int]) -> None:
    if not processor:
        return
    for step in processor.get("processors", []):  # a Sequence of processors
        _renumber_post_processor(step, new_id)
    for special in (processor.get("special_tokens") or {}).values():  # TemplateProcessing
        special["ids"] = [new_id[i] for i in special["ids"]]
    for key in ("cls", "sep"):  # RobertaProcessing, BertProcessing: [token, id]
        if key in processor:
            processor[key][1] = new_id[processor[key][1]]


def trim_folder(source: Path, texts: list[str], output: Path, keep_top: int) -> TrimReport:
    """Write the trimmed copy of the backbone folder `source` into `output` (atomically)."""
    if tokenizer_kind(source) != "sentencepiece":
        raise UserError(f"--backbone {source} has a WordPiece vocab.txt: trim-vocab trims SentencePiece vocabularies "
                        "(tokenizer.json), the large multilingual ones; a WordPiece vocabulary of ~21k needs no trimming")
    tokenizer = load_tokenizer(source)
    definition = json.loads(tokenizer.definition())  # 250k pieces: parsed once, for the scores and the rewrite
    # the instructions embedding models are given (model.text_prefix) keep their own pieces, so that the trimmed
    # model reads "query: " as the full one does, not as pieces of other words
    kept, used = kept_ids(tokenizer, [*texts, *INSTRUCTIONS], keep_top, piece_scores(definition))
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    rows = config["vocab_size"]
    report = TrimReport(str(source), len(tokenizer), len(kept), used, len(texts), kept, rows)
    with atomic_directory(output) as tmp:
        for name in ("tokenizer_config.json", "special_tokens_map.json", "README.md"):
            if (source / name).is_file():
                (tmp / name).write_bytes((source / name).read_bytes())
        (tmp / TOKENIZER_JSON).write_text(trimmed_definition(definition, kept), encoding="utf-8")
        (tmp / "config.json").write_text(json.dumps({**config, "vocab_size": len(kept)}, indent=2), encoding="utf-8")
        _write_trimmed_weights(source, tmp, np.array(kept), rows)
        (tmp / TRIM_INFO).write_text(json.dumps(asdict(report)), encoding="utf-8")
    return report


def _as_os_error(exc: Exception, path: Path) -> Exception:
    """A write error of the safetensors library as the OSError it wraps (a full disk is then told as every command
    tells one); any other error as it is."""
    for number in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
        if os.strerror(number) in str(exc):
            return OSError(number, os.strerror(number), str(path))
    return exc


def _write_trimmed_weights(source: Path, target: Path, kept: np.ndarray, rows: int) -> None:
    """Every tensor with one row per piece (the word embeddings, a tied decoder's bias) keeps the kept rows."""
    def cut(name, array):
        per_piece = array.ndim >= 1 and array.shape[0] == rows and not any(k in name for k in ("position", "token_type"))
        return np.ascontiguousarray(array[kept]) if per_piece else array

    if is_hf_folder(source):
        from safetensors.numpy import save_file

        if not (source / SAFETENSORS).is_file():
            raise UserError(f"{source} keeps its weights in pytorch_model.bin; convert it first (python -m paddle_ft "
                            "convert --from-hf) and trim the converted folder")
        try:
            save_file({name: cut(name, array) for name, array in read_safetensors(source / SAFETENSORS).items()},
                      str(target / SAFETENSORS), metadata={"format": "pt"})
        except Exception as exc:  # safetensors raises its own SafetensorError, an OSError's message inside
            raise _as_os_error(exc, target / SAFETENSORS) from None
        return
    import paddle

    state = paddle.load(str(source / PADDLE_WEIGHTS))
    save_state({name: paddle.to_tensor(cut(name, np.asarray(tensor))) for name, tensor in state.items()},
               target / PADDLE_WEIGHTS)
