"""The data audit: what in a config's splits would make its numbers wrong or its training weak, found and
counted before any training (`python -m paddle_ft audit --config C`).

Texts are compared after normalisation (Unicode NFKC, which folds full-width forms to their ASCII twins, and
without whitespace), so "好 评！" and "好评!" are one text. Leakage (a dev or test text also in train, or a
test text in dev) makes the reported scores optimistic; a text given two labels caps the accuracy any model
can reach and usually means a labelling mistake.
"""
from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the type only: the audit reads no model folder
    from paddle_ft.models.trim import TrimReport

SPLITS = ("train", "dev", "test")
NEAR_EMPTY = 2  # a text of this many characters or fewer (normalised) says too little to be classified
EXAMPLES = 5  # of each finding, the first few are listed with their split and line
NO_PROBLEMS = "no leakage between splits, no conflicting labels"  # what the table and the pages say of clean data
UNKNOWN_LIMIT = 0.01  # a split with more [UNK] tokens than this share is not read by the tokenizer it is given
COVERAGE_FIX = ("the tokenizer does not cover this text: use a backbone whose vocabulary does (a Chinese model for "
                "Chinese text), or a scratch encoder with a vocabulary written from the data "
                "(python -m paddle_ft init)")


def normalise(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def audit(examples: dict[str, list], tokenizer=None, max_length: int | None = None) -> dict:
    """Every finding on the splits `examples` ({split: rows}); the length and [UNK] figures when a tokenizer is
    given."""
    present = [s for s in SPLITS if s in examples]
    report = {"splits": {s: _split_report(examples[s]) for s in present},
              "leakage": leakage(examples), "conflicts": conflicts(examples)}
    if tokenizer is not None:
        for split in present:
            report["splits"][split].update(_token_report(examples[split], tokenizer, max_length))
    report["problems"] = _problems(report)
    return report


def leakage(examples: dict[str, list]) -> dict:
    """For each pair of splits (earlier, later): the later split's rows whose text is also in the earlier one."""
    found = {}
    texts = {s: {normalise(e.text) for e in examples[s]} for s in SPLITS if s in examples}
    for earlier, later in combinations([s for s in SPLITS if s in examples], 2):
        shared = [e for e in examples[later] if normalise(e.text) in texts[earlier]]
        found[f"{later}_in_{earlier}"] = {"rows": len(shared), "share": len(shared) / len(examples[later]),
                                          "examples": [_where(later, e) for e in shared[:EXAMPLES]]}
    return found


def conflicts(examples: dict[str, list]) -> dict:
    """Texts (normalised) given more than one label anywhere in the splits."""
    labels, seen = defaultdict(set), defaultdict(list)
    for split in SPLITS:
        for e in examples.get(split, []):
            key = normalise(e.text)
            labels[key].add(e.label_key)
            seen[key].append(_where(split, e))
    clashing = [key for key, names in labels.items() if len(names) > 1]
    return {"texts": len(clashing), "examples": [{"labels": sorted(labels[k]), "rows": seen[k][:EXAMPLES]}
                                                 for k in clashing[:EXAMPLES]]}


def _split_report(rows: list) -> dict:
    exact, normal = Counter(e.text for e in rows), Counter(normalise(e.text) for e in rows)
    near_empty = [e for e in rows if len(normalise(e.text)) <= NEAR_EMPTY]
    labels = Counter(name for e in rows for name in e.label_names)
    return {"rows": len(rows), "duplicates_exact": len(rows) - len(exact),
            "duplicates_normalised": len(rows) - len(normal),
            "near_empty": len(near_empty), "near_empty_examples": [_where("", e) for e in near_empty[:EXAMPLES]],
            "labels": dict(sorted(labels.items()))}


def _token_report(rows: list, tokenizer, max_length: int | None) -> dict:
    """Token lengths ([CLS] and [SEP] included) against max_length, and the share of [UNK] tokens."""
    encoded = tokenizer([e.text for e in rows], text_pair=[e.text_pair for e in rows] if rows[0].text_pair else None,
                        max_length=None, truncation=False)["input_ids"]
    lengths = np.array([len(ids) for ids in encoded])
    tokens, texts = unknown_shares(encoded, tokenizer.unk_token_id)
    report = {"tokens": {"p50": int(np.percentile(lengths, 50)), "p90": int(np.percentile(lengths, 90)),
                         "p99": int(np.percentile(lengths, 99)), "max": int(lengths.max())},
              "unknown_token_share": tokens, "unknown_text_share": texts}
    if max_length is not None:
        over = lengths[lengths > max_length]
        report["truncated"] = {"rows": int(len(over)), "share": len(over) / len(rows),
                               "mean_tokens_cut": float((over - max_length).mean()) if len(over) else 0.0}
    return report


def unknown_shares(token_ids, unk_id: int | None) -> tuple[float, float]:
    """(the share of the tokens that are [UNK], the share of the texts holding one) of tokenised texts."""
    if unk_id is None:  # a byte-level tokenizer has no unknown token
        return 0.0, 0.0
    counts = [int(np.count_nonzero(np.asarray(ids) == unk_id)) for ids in token_ids]
    total = sum(len(ids) for ids in token_ids)
    return sum(counts) / max(total, 1), sum(c > 0 for c in counts) / max(len(counts), 1)


def coverage_problem(split: str, tokens: float, texts: float, trim: TrimReport | None = None) -> str | None:
    """The line that says a split is not read by its tokenizer, with the fix; None when it is. `trim`: how the
    backbone's vocabulary was trimmed, when it was (then the pieces were there before the trim took them out)."""
    if tokens <= UNKNOWN_LIMIT:
        return None
    fix = COVERAGE_FIX if trim is None else (
        f"the backbone's vocabulary was trimmed to the pieces {trim.texts:,} texts use, and these texts use others: "
        f"trim {trim.source} again with more of your text (python -m paddle_ft trim-vocab --backbone {trim.source} "
        "--data TRAIN DEV TEST [UNLABELLED ...] --output DIR), or train on it untrimmed")
    return f"{split}: {tokens:.1%} of the tokens are [UNK] ({texts:.0%} of the texts hold one); {fix}"


def _problems(report: dict) -> list[str]:
    """One line per finding that makes scores wrong or training blind (what `--strict` fails on)."""
    lines = [f"{pair.replace('_in_', ' texts also in ')}: {found['rows']} ({found['share']:.1%})"
             for pair, found in report["leakage"].items() if found["rows"]]
    if report["conflicts"]["texts"]:
        lines.append(f"{report['conflicts']['texts']} texts carry more than one label")
    for split, found in report["splits"].items():
        if "unknown_token_share" in found:
            lines.append(coverage_problem(split, found["unknown_token_share"], found["unknown_text_share"]))
    return [line for line in lines if line]


def _where(split: str, example) -> dict:
    where = {"line": example.line, "text": example.text[:80]}
    return {"split": split, **where} if split else where


def table(report: dict) -> str:
    """The short table `audit` prints."""
    splits = report["splits"]
    lines = ["| split | rows | duplicates (exact / normalised) | near-empty | truncated | [UNK] tokens (texts) "
             "| labels |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, s in splits.items():
        truncated = f"{s['truncated']['rows']} ({s['truncated']['share']:.1%})" if "truncated" in s else "n/a"
        unknown = (f"{s['unknown_token_share']:.2%} ({s['unknown_text_share']:.0%})"
                   if "unknown_token_share" in s else "n/a")
        labels = label_counts(s["labels"])
        lines.append(f"| {name} | {s['rows']} | {s['duplicates_exact']} / {s['duplicates_normalised']} | "
                     f"{s['near_empty']} | {truncated} | {unknown} | {labels} |")
    lines.append("")
    lines += [f"problem: {line}" for line in report["problems"]] or [NO_PROBLEMS]
    return "\n".join(lines) + "\n"


def label_counts(labels: dict, shown: int = 5) -> str:
    """A split's label counts on one line: `负面 6920, 正面 6969`; of many labels, how many and the most and least
    frequent: `5000 labels; most: L00017 9, ...; fewest: L04410 1, ...`."""
    if len(labels) <= 2 * shown + 2:
        return _listed(labels.items())
    ranked = sorted(labels.items(), key=lambda item: (-item[1], item[0]))
    return f"{len(labels)} labels; most: {_listed(ranked[:shown])}; fewest: {_listed(ranked[-shown:])}"


def _listed(counts) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts)
