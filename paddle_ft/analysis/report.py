"""The training report: `OUT/report.html` and its pictures in `OUT/report/`, a folder that opens from disk.

Loss, learning rate and dev metrics over the steps; the confusion matrix (counts and row-normalised); the
per-class table; a reliability diagram with the expected calibration error; the most confident mistakes with
their texts; the config and the data summary (and the audit, where `audit` wrote one into OUT/audit). Every
number on the page comes from the run's results and events (`artifacts.run`) and the best model's answers on the
scored split.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paddle_ft.analysis.audit import NO_PROBLEMS, label_counts
from paddle_ft.analysis.explain import Explanation
from paddle_ft.artifacts.run import Event, Results, RunFiles
from paddle_ft.config import Config, config_to_dict, flat_config, load_config
from paddle_ft.engine.metrics import MANY_CLASSES, expected_calibration_error, per_class_extremes
from paddle_ft.io import atomic_path, write_text_atomically

REPORT_PAGE, REPORT_FOLDER = "report.html", "report"
WORST = 10  # mistakes listed
CONFUSED_PAIRS = 20  # of many classes, the most mistaken (gold, predicted) pairs listed
BINS = 10  # of the reliability diagram
SHORT_RUN = 20  # logged training steps up to which the curves mark each point
# fonts that draw Chinese (Noto Sans CJK from Debian's fonts-noto-cjk, WenQuanYi from fonts-wqy-zenhei, ...)
CJK_FONTS = ("CJK", "WenQuanYi", "Source Han", "Droid Sans Fallback", "AR PL", "Heiti", "SimHei")
CJK_FONT_FILES = ("cjk", "wqy", "wenquanyi", "sourcehan", "droidsansfallback", "uming", "ukai", "simhei", "notosanssc")


@dataclass
class Answers:
    """The best model on one labelled split, for the pictures that need answers rather than scores."""

    split: str
    texts: list[str]
    gold: np.ndarray         # [n] class ids
    probabilities: np.ndarray  # [n, classes]
    labels: tuple[str, ...]
    explanations: list[Explanation] = field(default_factory=list)
    """Of the most confident mistakes, most confident first (the report shows them highlighted)."""


def write_report(run_dir: Path, answers: Answers | None, data_summary: dict | None = None,
                 so_far: Results | None = None) -> Path:
    """Write OUT/report.html and OUT/report/*.png from what the run left in `run_dir`; returns the page. `so_far`: the
    best evaluation of a run that stopped before its end, which the page then reports as partial."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    folder = run_dir / REPORT_FOLDER
    folder.mkdir(exist_ok=True)
    run = RunFiles(run_dir)
    results = so_far or run.read_results()
    events = run.read_events()
    if any(e.kind == "train" for e in events):
        images = {"curves": _curves(events, results.metric, folder / "curves.png")}
        sections = [_metrics_section(results), _curves_section(images["curves"])]
    else:  # a zero-shot model: scored, never trained
        images = {}
        sections = [_metrics_section(results), "<h2>Training</h2><p>No training curve: this model took no training "
                                               "step (a zero-shot model: each class is its description's embedding)."
                                               "</p>"]
    if answers is not None and answers.probabilities.shape[1] == len(answers.labels) and answers.gold.ndim == 1:
        images["confusion"] = _confusion(answers, folder / "confusion.png") \
            if len(answers.labels) <= MANY_CLASSES else None  # a picture of 20,000 x 20,000 cells says nothing
        images["reliability"], ece = _reliability(answers, folder / "reliability.png")
        sections += [_answers_section(answers, images, ece), _mistakes_section(answers)]
    split = "test" if results.test else "dev"
    decision = (getattr(results, split) or {}).get("decision", {})
    if decision.get("abstain_below") is not None:
        sections.append(_decision_section(decision, split, _risk_coverage(decision, split, folder / "abstain.png")))
    sections += [_per_class_section(results, folder), _data_section(data_summary, run_dir), _config_section(run)]
    if so_far is not None:
        last = max((e.step for e in events if e.kind in ("train", "eval")), default=0)
        sections.insert(0, f'<p class="partial"><strong>Partial:</strong> this run stopped at step {last} before its '
                           f"end (it wrote no results file). The page shows what it left: its curves so far and its "
                           f"best model so far (step {so_far.best_step}, by dev {html.escape(so_far.metric)}); test "
                           "was not scored. Resume it with -o train.resume=auto to finish it.</p>")
    return write_page(run_dir / REPORT_PAGE, run_dir.name, sections)


def write_page(path: Path, title: str, sections: list[str]) -> Path:
    """A self-contained page (inline style; pictures by relative path) of HTML `sections`."""
    write_text_atomically(path, _page(title, sections))
    return path


def table_html(markdown: str) -> str:
    """A markdown table (as cv, sweep and audit print them) as an HTML table."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in markdown.strip().splitlines() if line.startswith("|") and not line.startswith("|--")
            and not set(line) <= set("|-: ")]
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"


# ----------------------------------------------------------------------------- pictures

def _curves(events: list[Event], metric: str, path: Path) -> str:
    import matplotlib.pyplot as plt

    train = [e for e in events if e.kind == "train" and e.values.get("loss") is not None]
    evals = [e for e in events if e.kind == "eval"]
    figure, (loss, lr, dev) = plt.subplots(1, 3, figsize=(13, 3.6))
    marker = "o" if len(train) <= SHORT_RUN else None  # a line through one or two points draws nothing
    loss.plot([e.step for e in train], [e.values["loss"] for e in train], color="tab:blue", marker=marker)
    loss.set(title="training loss", xlabel="step")
    lr.plot([e.step for e in train], [e.values["lr"] for e in train], color="tab:orange", marker=marker)
    lr.set(title="learning rate", xlabel="step")
    for name in dict.fromkeys([metric, "accuracy", "macro_f1", "micro_f1"]):
        points = [(e.step, e.values[name]) for e in evals if isinstance(e.values.get(name), (int, float))]
        if points:
            dev.plot(*zip(*points), marker="o", label=name)
    dev.set(title="dev metrics", xlabel="step")
    if evals:
        dev.legend(fontsize=8)
    return _save(figure, path)


def _risk_coverage(decision: dict, split: str, path: Path) -> str:
    """The accuracy of the answered texts against the share answered (the most confident first), and the point
    the model's abstain threshold picks."""
    import matplotlib.pyplot as plt

    coverage, accuracy = zip(*decision["risk_coverage"])
    figure, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(coverage, accuracy, marker=".", label="answering the most confident first")
    if decision["answered_accuracy"] is not None:  # at 0% coverage there is no answered text to score
        ax.plot([decision["coverage"]], [decision["answered_accuracy"]], "o", color="tab:red",
                label=f"abstain below {decision['abstain_below']:.3f}")
    ax.set(title=f"risk-coverage, {split}", xlabel="coverage (share of texts answered)",
           ylabel="accuracy of the answered texts", xlim=(0, 1.02))
    ax.legend(fontsize=8)
    return _save(figure, path)


def _confusion(answers: Answers, path: Path) -> str:
    import matplotlib.pyplot as plt

    counts = confusion_matrix(answers.gold, answers.probabilities.argmax(axis=1), len(answers.labels))
    rows = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    font = font_for(answers.labels)
    # label names where a font draws them; else class ids (boxes would say nothing), which the page names
    names = list(answers.labels) if font is not None else [str(i) for i in range(len(answers.labels))]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, matrix, title, form in ((axes[0], counts, "counts", "{:.0f}"), (axes[1], rows, "row-normalised", "{:.2f}")):
        ax.imshow(matrix, cmap="Blues")
        ax.set(title=f"confusion ({title}), {answers.split}", xlabel="predicted", ylabel="gold",
               xticks=range(len(names)), yticks=range(len(names)))
        ax.set_xticklabels(names, fontfamily=font or "sans-serif")
        ax.set_yticklabels(names, fontfamily=font or "sans-serif")
        for (i, j), value in np.ndenumerate(matrix):
            ax.text(j, i, form.format(value), ha="center", va="center",
                    color="white" if value > matrix.max() / 2 else "black")
    return _save(figure, path)


def font_for(labels) -> str | None:
    """A font family that draws every label name: the default one for ASCII names, else an installed CJK font
    (Debian: apt-get install fonts-noto-cjk); None when there is none. matplotlib lists the fonts it found when it
    first ran (its cache, ~/.cache/matplotlib): a CJK font installed since is missing there, so when the cache has
    none the font folders are looked through, and such a font is added for this process."""
    if all(name.isascii() for name in labels):
        return "sans-serif"
    from matplotlib import font_manager

    manager = font_manager.fontManager
    family = _cjk_family(manager.ttflist)
    if family is None:  # a stale cache, or no CJK font at all
        known = {font.fname for font in manager.ttflist}
        for path in font_manager.findSystemFonts():
            if path not in known and _looks_cjk(Path(path).name):
                manager.addfont(path)
        family = _cjk_family(manager.ttflist)
    return family


def _cjk_family(fonts) -> str | None:
    return next((font.name for font in sorted(fonts, key=lambda f: (f.name, f.fname))
                 if any(mark in font.name for mark in CJK_FONTS) or _looks_cjk(Path(font.fname).name)), None)


def _looks_cjk(file_name: str) -> bool:
    plain = file_name.lower().replace("-", "").replace("_", "")
    return any(mark in plain for mark in CJK_FONT_FILES)


def _reliability(answers: Answers, path: Path) -> tuple[str, float]:
    import matplotlib.pyplot as plt

    confidence = answers.probabilities.max(axis=1)
    right = answers.probabilities.argmax(axis=1) == answers.gold
    which = np.minimum((confidence * BINS).astype(int), BINS - 1)
    centres = (np.arange(BINS) + 0.5) / BINS
    accuracy = [right[which == b].mean() if (which == b).any() else np.nan for b in range(BINS)]
    ece = expected_calibration_error(answers.probabilities, answers.gold)
    figure, ax = plt.subplots(figsize=(5, 4.6))
    ax.bar(centres, accuracy, width=1 / BINS, edgecolor="black", label="accuracy in bin")
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfectly calibrated")
    ax.set(title=f"reliability, {answers.split} (ECE {ece:.3f})", xlabel="confidence (top probability)",
           ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8, loc="upper left")
    return _save(figure, path), ece


def confusion_matrix(gold: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """[gold, predicted] counts."""
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (gold, predicted), 1)
    return matrix


def _save(figure, path: Path) -> str:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=90)
    plt.close(figure)
    return f"{REPORT_FOLDER}/{path.name}"


# ----------------------------------------------------------------------------- sections

def _metrics_section(results: Results) -> str:
    reports = {split: getattr(results, split) for split in ("dev", "test") if getattr(results, split)}
    names = list(dict.fromkeys(n for report in reports.values() for n, v in report.items() if isinstance(v, float)))
    rows = "".join(f"<tr><th>{split}</th>" + "".join(
        f'<td data-metric="{split}.{n}">{report[n]:.4f}</td>' if isinstance(report.get(n), float)
        else "<td></td>" for n in names) + "</tr>" for split, report in reports.items())
    header = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    return (f"<h2>Best model (step {results.best_step}, picked by {html.escape(results.metric)})</h2>"
            f"<table><tr><th></th>{header}</tr>{rows}</table>")


def _curves_section(image: str) -> str:
    return f'<h2>Training</h2><img src="{image}" alt="loss, learning rate and dev metrics over the steps">'


def _answers_section(answers: Answers, images: dict, ece: float) -> str:
    if images["confusion"] is None:
        confusion = _confused_pairs(answers)
    else:
        unnamed = "" if font_for(answers.labels) is not None else (
            " No font on this machine draws these names, so the picture numbers the classes: install one (Debian: "
            "apt-get install fonts-noto-cjk; elsewhere Noto Sans CJK or WenQuanYi) and run report again.")
        confusion = (f'<img src="{images["confusion"]}" alt="confusion matrix"><p>Classes: '
                     f"{html.escape(', '.join(f'{i} = {name}' for i, name in enumerate(answers.labels)))}."
                     f"{unnamed}</p>")
    return (f"<h2>Answers on {answers.split} ({len(answers.gold)} texts)</h2>{confusion}"
            f'<img src="{images["reliability"]}" alt="reliability diagram">'
            f'<p>Expected calibration error: <span data-metric="{answers.split}.ece_page">{ece:.4f}</span> '
            f"(how far the top probability is from how often it is right; 0 is perfect).</p>")


def _confused_pairs(answers: Answers) -> str:
    """Of many classes, the (gold, predicted) pairs mistaken most often, instead of a confusion matrix."""
    predicted = answers.probabilities.argmax(axis=1)
    wrong = predicted != answers.gold
    pairs, counts = np.unique(np.stack([answers.gold[wrong], predicted[wrong]], axis=1), axis=0, return_counts=True)
    top = np.argsort(-counts, kind="stable")[:CONFUSED_PAIRS]
    rows = "".join(f"<tr><td>{counts[i]}</td><td>{html.escape(answers.labels[pairs[i, 0]])}</td>"
                   f"<td>{html.escape(answers.labels[pairs[i, 1]])}</td></tr>" for i in top)
    return (f"<p>{len(answers.labels)} classes: the pairs mistaken most often ({int(wrong.sum())} mistakes in "
            f"{len(pairs)} pairs).</p><table><tr><th>texts</th><th>gold</th><th>predicted</th></tr>{rows}</table>")


def _decision_section(decision: dict, split: str, image: str) -> str:
    if decision["answered_accuracy"] is None:
        answers = (f"it answers none of the texts: all {decision['abstained']} go to a person (its accuracy on all "
                   f"would be {decision['accuracy_of_all']:.4f}; lower train.decision.abstain_below or raise "
                   "target_coverage)")
    else:
        answers = (f'it answers <span data-metric="{split}.coverage">{decision["coverage"]:.4f}</span> of the texts, '
                   f'{decision["abstained"]} abstained, with accuracy '
                   f'<span data-metric="{split}.answered_accuracy">{decision["answered_accuracy"]:.4f}</span> on '
                   f'those it answers (against {decision["accuracy_of_all"]:.4f} on all)')
    return (f"<h2>Abstaining ({split})</h2><p>Below a top probability of "
            f'<span data-metric="{split}.abstain_below">{decision["abstain_below"]:.4f}</span> the model abstains '
            f"(a person decides): {answers}.</p>"
            f'<img src="{image}" alt="risk-coverage curve">')


def _mistakes_section(answers: Answers) -> str:
    predicted = answers.probabilities.argmax(axis=1)
    wrong = np.flatnonzero(predicted != answers.gold)
    worst = wrong[np.argsort(-answers.probabilities[wrong, predicted[wrong]], kind="stable")][:WORST]
    names = [html.escape(name) for name in answers.labels]
    rows = "".join(f"<tr><td>{answers.probabilities[i, predicted[i]]:.3f}</td><td>{names[predicted[i]]}</td>"
                   f"<td>{names[answers.gold[i]]}</td><td>{html.escape(answers.texts[i])}</td></tr>" for i in worst)
    why = "" if not answers.explanations else (
        "<h3>Why the most confident ones</h3><p>Each token shaded by how much it pushed the model towards the label "
        "it gave (green) or away from it (red), by integrated gradients; below, the training texts the model sees as "
        "nearest.</p>" + "".join(explanation_html(e) for e in answers.explanations))
    return (f"<h2>The most confident mistakes ({len(wrong)} wrong in all)</h2><table><tr><th>probability</th>"
            f"<th>predicted</th><th>gold</th><th>text</th></tr>{rows}</table>{why}")


def explanation_html(explanation: Explanation) -> str:
    """The explained text with each token shaded by its attribution (green towards the label, red away, the
    strongest fully), the numbers, and the nearest texts."""
    strongest = max(float(np.abs(explanation.attributions).max()), 1e-12)
    spans = []
    for token, segment, value in zip(explanation.tokens, explanation.segments, explanation.attributions):
        if token in ("[CLS]", "[SEP]", "[PAD]"):
            spans.append(" ‖ " if token == "[SEP]" and segment == 0 and explanation.text_pair else "")
            continue
        colour = "0,150,0" if value >= 0 else "200,0,0"
        spans.append(f'<span title="{value:+.4f}" style="background:rgba({colour},{abs(value) / strongest:.2f})">'
                     f"{html.escape(token.removeprefix('##'))}</span>")
    near = "".join(f"<li>{n.similarity:.3f} {html.escape(n.label or '')}: {html.escape(n.text)}</li>"
                   for n in explanation.neighbours)
    return (f'<div class="explanation"><p><b>{html.escape(explanation.label)}</b> '
            f"{explanation.probability:.3f} (from {explanation.baseline_probability:.3f} at the baseline; "
            f"completeness error {explanation.completeness_error:.2g})</p><p style=\"font-size:1.2em\">"
            f"{''.join(spans)}</p>" + (f"<ul>{near}</ul>" if near else "") + "</div>")


def _per_class_section(results: Results, folder: Path) -> str:
    split = "test" if results.test else "dev"
    scores = getattr(results, split) or {}
    table = scores.get("per_class") or scores.get("per_label")
    if not table:
        return ""
    scores_names = list(next(iter(table.values())))
    header = "<tr><th>label</th>" + "".join(f"<th>{k}</th>" for k in scores_names) + "</tr>"
    if len(table) <= MANY_CLASSES:
        return f"<h2>Per class, {split}</h2><table>{header}{_class_rows(table, table, split)}</table>"
    best, worst = per_class_extremes(table)
    full = write_per_class(folder / "per_class.tsv", table)
    return (f"<h2>Per class, {split}: the {len(best)} best and {len(worst)} worst of {len(table)}</h2>"
            f"<table>{header}{_class_rows(table, best, split)}"
            f"<tr><td colspan=\"{len(scores_names) + 1}\">...</td></tr>{_class_rows(table, worst, split)}</table>"
            f'<p>Every class: <a href="{REPORT_FOLDER}/{full.name}">{REPORT_FOLDER}/{full.name}</a>.</p>')


def write_per_class(path: Path, table: dict) -> Path:
    """A per-class (per-label) table as TSV: label, then its scores."""
    names = list(next(iter(table.values())))
    write_text_atomically(path, "\t".join(["label", *names]) + "\n" + "".join(
        "\t".join([name, *(str(row[k]) for k in names)]) + "\n" for name, row in table.items()))
    return path


def _class_rows(table: dict, names, split: str) -> str:
    return "".join(f"<tr><td>{html.escape(name)}</td>" + "".join(
        f'<td data-metric="{split}.per_class.{html.escape(name)}.{k}">{v:.4f}</td>' if isinstance(v, float)
        else f"<td>{v}</td>" for k, v in table[name].items()) + "</tr>" for name in names)


def _data_section(summary: dict | None, run_dir: Path) -> str:
    parts = []
    if summary:
        rows = "".join(f"<tr><td>{split}</td><td>{s['rows']}</td><td>{s['duplicates_normalised']}</td>"
                       f"<td>{s['near_empty']}</td><td data-metric=\"{split}.unknown_token_share\">"
                       f"{_share(s.get('unknown_token_share'))}</td>"
                       f"<td>{html.escape(label_counts(s['labels']))}</td></tr>"
                       for split, s in summary["splits"].items())
        parts.append("<table><tr><th>split</th><th>rows</th><th>duplicates (normalised)</th><th>near-empty</th>"
                     f"<th>[UNK] tokens</th><th>labels</th></tr>{rows}</table>")
        problems = summary.get("problems") or [NO_PROBLEMS]
        parts.append("<ul>" + "".join(f"<li>{html.escape(p)}</li>" for p in problems) + "</ul>")
    audit = run_dir / "audit" / "audit.json"
    if audit.is_file():
        parts.append('<p>The full audit: <a href="audit/audit.json">audit/audit.json</a>.</p>')
    return "<h2>Data</h2>" + "".join(parts) if parts else ""


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _config_section(run: RunFiles) -> str:
    """What the run set otherwise than the defaults first, then the whole resolved config (folded)."""
    path = run.config_file
    if not path.is_file():
        return f"<h2>Config</h2><p>(no {path.name})</p>"
    changed = changed_keys(load_config(path))
    rows = "".join(f"<tr><td>{html.escape(key)}</td><td>{html.escape(str(value))}</td><td>"
                   f"{html.escape(str(default))}</td></tr>" for key, (value, default) in changed.items())
    return (f"<h2>Config</h2><p>What this run set otherwise than the defaults ({len(changed)} keys):</p>"
            f"<table><tr><th>key</th><th>this run</th><th>default</th></tr>{rows}</table>"
            f"<details><summary>The whole resolved config</summary><pre>"
            f"{html.escape(path.read_text(encoding='utf-8'))}</pre></details>")


def changed_keys(config: Config) -> dict[str, tuple]:
    """{dotted key: (this config's value, the default)} where they differ, in the config's order."""
    mine, defaults = flat_config(config_to_dict(config)), flat_config(config_to_dict(Config()))
    return {key: (value, defaults.get(key)) for key, value in mine.items() if value != defaults.get(key)}


def _page(title: str, sections: list[str]) -> str:
    # the script only checks that every picture loaded, for people and for the browser test alike
    return f"""<!DOCTYPE html>
<html lang="zh"><head><meta charset="utf-8"><title>paddle_ft report: {html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse;margin:0.5em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}img{{max-width:100%;margin:0.5em 0}}
pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style></head>
<body><h1>paddle_ft report: {html.escape(title)}</h1>
{''.join(sections)}
<script>
window.addEventListener("load", () => {{
  const images = [...document.images];
  document.body.dataset.imagesLoaded = String(images.filter(i => i.complete && i.naturalWidth > 0).length);
  document.body.dataset.images = String(images.length);
}});
</script></body></html>
"""
