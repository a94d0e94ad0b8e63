"""Tokenise once: token ids kept on disk as memory-mapped arrays, keyed by what determines them.

The key is a SHA-256 of the texts (so any change to the data file that changes a text invalidates
it), the tokenizer's class, rules and vocabulary, and max_length. Labels are not cached: they are
cheap and come from the label map of the run. An entry is written to a temporary folder and renamed
into place, so a crash never leaves a half-written entry behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from paddle_ft.data.features import Features, label_ids, tokenize
from paddle_ft.data.labels import LabelMap
from paddle_ft.data.readers import Example
from paddle_ft.text import Truncation

FORMAT_VERSION = 1
_ARRAYS = ("input_ids", "token_type_ids", "offsets")


def cache_key(examples: Sequence[Example], tokenizer, max_length: int, truncation: Truncation = Truncation()) -> str:
    slow = getattr(tokenizer, "slow", tokenizer)  # the fast tokenizer gives the same ids: same key
    basic = getattr(slow, "basic_tokenizer", None)
    rules = {"version": FORMAT_VERSION, "class": type(slow).__name__, "max_length": max_length,
             "lower": getattr(basic, "do_lower_case", None), "chinese": getattr(basic, "tokenize_chinese_chars", None),
             "accents": getattr(basic, "strip_accents", None), "special": list(slow.all_special_tokens)}
    if truncation.mode != "head":  # absent for head, so the caches written before the choice existed stay valid
        rules["truncation"] = [truncation.mode, truncation.head_tokens]
    digest = hashlib.sha256(json.dumps(rules, sort_keys=True).encode())
    if hasattr(slow, "definition"):  # a tokenizer.json: its pieces, scores and normaliser, all that decides the ids
        digest.update(slow.definition().encode())
    else:
        digest.update(json.dumps(sorted(slow.get_vocab().items()), ensure_ascii=False).encode())
    for example in examples:
        digest.update(example.text.encode())
        digest.update(b"\x00" if example.text_pair is None else b"\x01" + example.text_pair.encode())
        digest.update(b"\x1e")
    return digest.hexdigest()


def cached_tokenize(examples: Sequence[Example], tokenizer, max_length: int, label_map: LabelMap | None,
                    cache_dir: str | Path | None, truncation: Truncation = Truncation()) -> tuple[Features, bool]:
    """`tokenize()` through the cache; returns (features, True when they came from the cache)."""
    if cache_dir is None or truncation.mode == "sliding_window":  # the cache keeps one row per text
        return tokenize(examples, tokenizer, max_length, label_map, truncation), False
    entry = Path(cache_dir).expanduser() / cache_key(examples, tokenizer, max_length, truncation)
    labels = label_ids(examples, label_map)
    arrays = _read(entry, len(examples))
    if arrays is not None:
        return _split(arrays, labels), True
    features = tokenize(examples, tokenizer, max_length, label_map, truncation)
    _write(entry, features)
    return features, False


def _read(entry: Path, count: int) -> dict | None:
    """The entry's arrays, or None when it is missing or damaged (truncated, garbled, inconsistent):
    a damaged entry is replaced by tokenising again, never trusted and never a crash."""
    if not entry.is_dir():
        return None
    try:
        arrays = {name: np.load(entry / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
    except (OSError, ValueError, EOFError):
        arrays = None
    if arrays is not None:
        offsets = arrays["offsets"]
        consistent = (len(offsets) == count + 1 and offsets[0] == 0 and bool(np.all(np.diff(offsets) >= 0))
                      and offsets[-1] == len(arrays["input_ids"]) == len(arrays["token_type_ids"]))
        if consistent:
            return arrays
    shutil.rmtree(entry, ignore_errors=True)
    return None


def _split(arrays: dict, labels: np.ndarray | None) -> Features:
    """Per-example views into the memory-mapped flat arrays (nothing is copied)."""
    offsets = arrays["offsets"]
    bounds = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    return Features([arrays["input_ids"][a:b] for a, b in bounds],
                    [arrays["token_type_ids"][a:b] for a, b in bounds], labels)


def _write(entry: Path, features: Features) -> None:
    """Save `features` as `entry`; a cache that cannot be written costs speed, not correctness, so a
    failure is a one-line warning and the run goes on."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError as exc:
        return _warn_unwritable(entry, exc)
    try:
        offsets = np.concatenate([[0], np.cumsum(features.lengths)]).astype(np.int64)
        np.save(tmp / "input_ids.npy", np.concatenate(features.input_ids) if len(features) else np.zeros(0, np.int64))
        np.save(tmp / "token_type_ids.npy",
                np.concatenate(features.token_type_ids) if len(features) else np.zeros(0, np.int64))
        np.save(tmp / "offsets.npy", offsets)
        if not entry.exists():  # another process may have written the same entry meanwhile: keep it
            os.replace(tmp, entry)  # atomic
    except OSError as exc:
        _warn_unwritable(entry, exc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _warn_unwritable(entry: Path, exc: OSError) -> None:
    print(f"warning: the feature cache {entry.parent} is not writable ({exc.strerror or exc}); token ids are "
          "computed again on every run. Point data.cache_dir at a writable folder, or set it to null",
          file=sys.stderr)
