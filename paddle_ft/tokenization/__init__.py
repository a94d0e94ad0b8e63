"""Tokenizers, one owner for their choice: `load_tokenizer` reads a model folder's tokenizer whatever its kind.

- WordPiece (a vocab.txt: BERT, ERNIE, RoBERTa-wwm): PaddleNLP's tokenizer, encoding through its fast equivalent
  (`wordpiece`).
- SentencePiece (a tokenizer.json and no vocab.txt: XLM-R, multilingual-e5, bge-m3): `sentencepiece`.

Both encode through the same `FastTokenizer` calls, so training, eval, export, predict and serve read a text the same
way for either kind. What counts as a text at all is one rule for both (`readable`).
"""
from __future__ import annotations

from pathlib import Path

from paddle_ft.errors import UserError, first_line
from paddle_ft.tokenization.fast import FastTokenizer
from paddle_ft.tokenization.readable import NO_TOKEN, check_texts, readable, readable_pattern, without_tokens
from paddle_ft.tokenization.sentencepiece import SentencePieceTokenizer, is_sentencepiece_folder
from paddle_ft.tokenization.wordpiece import FastBertTokenizer, fast_tokenizer_for, fastest

__all__ = ["NO_TOKEN", "FastBertTokenizer", "FastTokenizer", "SentencePieceTokenizer", "check_texts", "fast_tokenizer_for",
           "fastest", "load_tokenizer", "readable", "readable_pattern", "tokenizer_kind", "with_text_prefix",
           "without_tokens"]


def tokenizer_kind(folder: str | Path) -> str:
    """'sentencepiece' for a tokenizer.json without vocab.txt, else 'wordpiece' (PaddleNLP decides the class)."""
    return "sentencepiece" if is_sentencepiece_folder(Path(folder)) else "wordpiece"


def load_tokenizer(folder: str | Path, text_prefix: str = ""):
    """The tokenizer saved in a model folder (a backbone, best/ or an export) or named (a PaddleNLP model name), in
    its fast form where it has one, putting `text_prefix` before every text (the model's `text_prefix`). Raises
    UserError with the folder and the reason when it cannot be read."""
    return with_text_prefix(_load_tokenizer(folder), text_prefix, str(folder))


def with_text_prefix(tokenizer, text_prefix: str, source: str):
    """`tokenizer`, putting `text_prefix` before every text it encodes."""
    if text_prefix:
        if not isinstance(tokenizer, FastTokenizer):
            raise UserError(f"the tokenizer of '{source}' has no fast form, which model.text_prefix needs; remove it")
        tokenizer.text_prefix = text_prefix
    return tokenizer


def _load_tokenizer(folder: str | Path):
    path = Path(folder)
    if is_sentencepiece_folder(path):
        return SentencePieceTokenizer.from_folder(path)
    if path.is_dir() and not any((path / name).is_file() for name in ("vocab.txt", "tokenizer_config.json")):
        found = "sentencepiece.bpe.model" if (path / "sentencepiece.bpe.model").is_file() else None
        hint = ("it has sentencepiece.bpe.model but no tokenizer.json: save the tokenizer with transformers' "
                "XLMRobertaTokenizerFast (save_pretrained writes tokenizer.json) and give that folder") if found else \
            "paddle_ft reads a WordPiece vocab.txt or a Hugging Face tokenizer.json"
        raise UserError(f"{path} holds no tokenizer of a kind paddle_ft knows; {hint}")
    from paddlenlp.transformers import AutoTokenizer

    try:
        return fastest(AutoTokenizer.from_pretrained(str(folder)))
    except Exception as exc:  # PaddleNLP raises a variety of errors for a name or folder it cannot use
        raise UserError(f"cannot load the tokenizer of '{folder}' ({first_line(exc)})") from None
