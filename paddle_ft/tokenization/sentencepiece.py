"""SentencePiece tokenizers kept as a Hugging Face `tokenizer.json` (XLM-R, multilingual-e5, bge-m3, LaBSE's kind):
a unigram (or BPE) model over pieces marked with "▁" where a word starts, no vocab.txt.

`SentencePieceTokenizer` reads and writes such a folder the way `transformers` does (tokenizer.json beside
tokenizer_config.json and special_tokens_map.json, so `AutoTokenizer.from_pretrained` gives the same ids; tested), and
offers the part of PaddleNLP's tokenizer interface that paddle_ft uses, so a backbone of this kind goes wherever a
WordPiece one does.
"""
from __future__ import annotations

import json
from pathlib import Path

from paddle_ft.errors import UserError, first_line
from paddle_ft.tokenization.fast import FastTokenizer

TOKENIZER_JSON, TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP = "tokenizer.json", "tokenizer_config.json", \
    "special_tokens_map.json"
# XLM-R's specials (fairseq's order: <s> 0, <pad> 1, </s> 2, <unk> 3; <mask> last), used where a folder names none
XLMR_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                 "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}


class SentencePieceTokenizer(FastTokenizer):
    """<s> text </s> for one text, <s> A </s></s> B </s> for a pair (segment ids all 0), as XLM-R frames them."""

    def __init__(self, backend, specials: dict[str, str]):
        super().__init__(backend)
        self.specials = specials
        for role, token in specials.items():
            if backend.token_to_id(token) is None:
                raise ValueError(f"its {role} {token!r} is not in the vocabulary")
        self.vocab = backend.get_vocab(with_added_tokens=True)  # piece -> id

    @classmethod
    def from_folder(cls, folder: Path) -> SentencePieceTokenizer:
        from tokenizers import Tokenizer

        try:
            backend = Tokenizer.from_file(str(folder / TOKENIZER_JSON))
            settings = _read_json(folder / TOKENIZER_CONFIG)
            settings.update(_read_json(folder / SPECIAL_TOKENS_MAP))
            specials = {role: _token_text(settings.get(role, default)) for role, default in XLMR_SPECIALS.items()}
            return cls(backend, specials)
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
            raise UserError(f"{folder / TOKENIZER_JSON} cannot be read as a tokenizer ({first_line(exc)}); the file "
                            "is damaged, or not a Hugging Face tokenizer.json") from None

    def save_pretrained(self, directory: str) -> None:
        directory = Path(directory)
        self._truncate_at(None)  # a saved file carries no truncation setting of ours
        self._backend.save(str(directory / TOKENIZER_JSON))
        # the class that reads tokenizer.json as it is: transformers 5's XLMRobertaTokenizer rebuilds the pipeline
        # around the vocabulary and leaves the normaliser out (a fullwidth comma then stays one, and is unknown)
        config = {**self.specials, "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512}
        (directory / TOKENIZER_CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        (directory / SPECIAL_TOKENS_MAP).write_text(json.dumps(self.specials, indent=2, ensure_ascii=False),
                                                    encoding="utf-8")

    def definition(self) -> str:
        """The whole tokenizer as JSON (normaliser, pieces and scores, specials): equal definitions, equal ids."""
        self._truncate_at(None)
        return self._backend.to_str()

    def pair_frame(self) -> tuple[list[int], list[int], list[int], int]:
        return [self.cls_token_id], [self.sep_token_id] * 2, [self.sep_token_id], 0

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        return len(self)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self._backend.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        unk = self.unk_token_id
        return [self.vocab.get(token, unk) for token in tokens]

    @property
    def all_special_tokens(self) -> list[str]:
        return list(dict.fromkeys(self.specials.values()))

    def __getattr__(self, name):  # cls_token, cls_token_id, pad_token_id, ... from the specials
        specials = self.__dict__.get("specials")
        if specials is None or name.startswith("__"):
            raise AttributeError(name)
        if name in specials:
            return specials[name]
        if name.endswith("_id") and name[:-3] in specials:
            return self.vocab[specials[name[:-3]]]
        raise AttributeError(name)


def is_sentencepiece_folder(folder: Path) -> bool:
    """A folder whose tokenizer is a tokenizer.json and no WordPiece vocab.txt."""
    return (folder / TOKENIZER_JSON).is_file() and not (folder / "vocab.txt").is_file()


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    return value if isinstance(value, dict) else {}


def _token_text(value) -> str:
    """transformers writes a special token as its text or as {"content": text, ...}."""
    return value["content"] if isinstance(value, dict) else str(value)
