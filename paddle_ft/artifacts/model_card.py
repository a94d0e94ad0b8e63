"""`MODEL_CARD.md`: what a model does, on which data it was trained and scored, its scores with their
uncertainty, how it was checked, where it came from and how to make it again. Written from what the folder knows
of itself (its `ModelMeta` and the provenance its `manifest.json` records), beside that manifest, by `best/`'s
owner (`bundle`) and the export's (`export_folder`)."""
from __future__ import annotations

from paddle_ft.artifacts.manifest import MANIFEST
from paddle_ft.artifacts.meta import ModelMeta

MODEL_CARD = "MODEL_CARD.md"
SCORED = ("dev", "test")
# unlabeled-N: the files a distilled student learnt from its teacher alone; corrections: the reviewed label changes
DATA = ("train", "unlabeled", "dev", "test", "corrections")


def model_card(name: str, meta: ModelMeta, provenance: dict, checks: str = "") -> str:
    """The card titled `name`. `provenance` is what the manifest records beside the files (versions, and for a
    trained model its data, metrics, seed and config); `checks` says how the folder was checked (an export's
    parity), a paragraph or nothing."""
    made = provenance["versions"]
    commit = made.get("paddle_ft_commit") or "not from a git checkout"
    return f"""# Model card: {name}

## What it does
{_what_it_does(meta)}

## Data
{_data(provenance.get("data"))}

## Results
{_results(provenance.get("metrics"), meta)}{_class_changes(provenance.get("class_changes"))}

## How it was checked
{checks}{_verify_line(bool(checks))}

## Where it came from
{_pretrained(provenance)}Made with Python {made["python"]}, Paddle {made["paddle"]} ({made["paddle_build"]}), PaddleNLP {made["paddlenlp"]},
paddle_ft {made["paddle_ft"]} ({commit}).
{_reproduce(provenance)}
## Limits
It knows only the labels above: a text that fits none of them still gets one (an abstain threshold, train.decision,
routes the least sure to a person). Its scores were measured on the data above; texts unlike them (another domain,
another language, another period) can score lower.
"""


def _pretrained(provenance: dict) -> str:
    """The pretrained encoder it was fine-tuned from, as its folder describes itself (source and licence); nothing
    where the manifest does not record it (a model of an earlier paddle_ft)."""
    if "pretrained" not in provenance:
        return ""
    source = provenance["pretrained"]
    if source is None:
        return "Its encoder started from random weights (no pretrained encoder).\n\n"
    trimmed = source.get("trimmed")
    kept = (f" Its vocabulary was trimmed to the {trimmed['pieces_after']:,} of {trimmed['pieces_before']:,} pieces "
            f"that {trimmed['texts']:,} texts use (python -m paddle_ft trim-vocab).") if trimmed else ""
    about = source.get("readme")
    described = ("\n\nIts folder describes it so:\n\n" + "\n".join(f"> {line}" if line else ">"
                                                                 for line in about.strip().splitlines())) if about else ""
    return f"Fine-tuned from the pretrained encoder `{source['backbone']}`.{kept}{described}\n\n"


def _verify_line(engines: bool) -> str:
    return (f"`python -m paddle_ft verify <this folder>` checks every file against `{MANIFEST}`"
            + (" and the engines against each other again" if engines else "")
            + "; with `--data FILE` (one of the files above) it scores the model on it again and compares.")


def _what_it_does(meta: ModelMeta) -> str:
    reads = "text pairs" if meta.takes_text_pair else "texts"
    if meta.multi_label:
        answer = ("each text gets the labels whose probability reaches their threshold (tuned on dev): "
                  + ", ".join(f"{label} {t:.3f}" for label, t in zip(meta.labels, meta.label_thresholds)))
    else:
        answer = "each text gets its most probable label" + (
            f"; below a top probability of {meta.abstain_below:.4f} the answer carries \"abstained\": true (a person "
            "should decide)" if meta.abstain_below is not None else "")
    head = ("\nIts head holds a prototype per label: a text's score for a label is its cosine to the prototype times "
            "a learned scale (labels can be added or removed without retraining: add-class, remove-class)."
            if meta.head == "prototype" else "")
    prefix = f' Every text is read with "{meta.text_prefix}" before it.' if meta.text_prefix else ""
    return (f"A {meta.task.replace('_', '-')} classifier of Chinese {reads} into {meta.num_classes} labels: "
            f"{', '.join(meta.labels)}.{head}{prefix}\nIt reads up to {meta.max_length} tokens of a text "
            f"({meta.truncation} truncation beyond that); {answer}.\nProbabilities are the softmax of the logits "
            f"divided by {meta.temperature:.4g} (1 = as trained).")


def _data(data: dict | None) -> str:
    if not data:
        return "Not recorded: this model was not written by a training run of this paddle_ft."
    ordered = sorted(data, key=lambda split: DATA.index(split.split("-")[0]) if split.split("-")[0] in DATA else 9)
    rows = [f"| {split} | `{data[split]['path']}` | {data[split]['rows']} | `{data[split]['sha256'][:16]}` |"
            for split in ordered]
    return "\n".join(["| split | file | rows used | sha256 (first 16) |", "|---|---|---:|---|", *rows])


def _results(metrics: dict | None, meta: ModelMeta) -> str:
    if not metrics:
        return "Not recorded: no split was scored when this model was written."
    names = ("micro_f1", "macro_f1", "subset_accuracy") if meta.multi_label else ("accuracy", "macro_f1")
    lines = ["Scores of the saved model, with 95% bootstrap intervals (1,000 resamples of the split's texts):", ""]
    for split in SCORED:
        report = metrics.get(split)
        if not report:
            continue
        scores = []
        for metric in names:
            low_high = report.get("intervals", {}).get(metric)
            span = f" [{low_high[0]:.4f}, {low_high[1]:.4f}]" if low_high else ""
            scores.append(f"{metric} {report[metric]:.4f}{span}")
        if "ece" in report:
            scores.append(f"ECE {report['ece']:.4f}")
        decision = report.get("decision", {})
        if decision.get("coverage") is not None:
            answered = decision["answered_accuracy"]
            scores.append(f"answered {decision['coverage']:.1%} of texts"
                          + (f" at accuracy {answered:.4f}" if answered is not None else ""))
        lines.append(f"- {split} ({report['examples']} texts): " + "; ".join(scores))
    return "\n".join(lines)


def _class_changes(changes: list | None) -> str:
    """The classes added or removed after training (add-class, remove-class), oldest first."""
    if not changes:
        return ""
    lines = ["", "", "Classes changed after training, without retraining (not scored since: `python -m paddle_ft eval "
                     "--model <this folder> --data FILE` scores it):"]
    for change in changes:
        if "added" in change:
            sources = ([f"{change['examples']['rows']} examples in `{change['examples']['path']}` (sha256 "
                        f"`{change['examples']['sha256'][:16]}`)"] if "examples" in change else []) + \
                      ([f"the description \"{change['description']}\""] if "description" in change else [])
            reference = change["reference"]
            lines.append(f"- added {change['added']}, its prototype from {' and '.join(sources)}, to "
                         f"`{change['from']['model']}` (python -m paddle_ft add-class); its bias {change['bias']:+.2f} "
                         f"lets it answer at most {reference['max_changed']:.1%} of {reference['rows']} rows of the "
                         f"other classes in `{reference['path']}`")
        else:
            lines.append(f"- removed {change['removed']} from `{change['from']['model']}` (python -m paddle_ft "
                         "remove-class)")
    return "\n".join(lines)


def _reproduce(provenance: dict) -> str:
    if "config" not in provenance:
        return ""
    return (f"\n## How to make it again\nWith the data files above in place (their sha256 must match), the versions "
            f"above and seed {provenance.get('seed')}: `python tools/train.py --config config.yaml`, where config.yaml "
            f"is the training run's own (the same resolved configuration as `config` in `{MANIFEST}`). The same kind "
            "of machine gives the same model.\n")
