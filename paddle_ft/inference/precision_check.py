"""Which precision to run an export at on this CPU, measured on labelled texts: fp32 (backend auto), bf16 (Paddle
Inference with oneDNN, where the CPU has AVX512-BF16 or AMX) and int8 (ONNX Runtime on the graph quantized as
`paddle_ft quantize` does it), each timed over the texts in batches of 32, scored, and compared with fp32's answers.

The recommendation is the fastest precision that keeps accuracy within MAX_DROP points of fp32's, gives fp32's answer
on at least MIN_AGREEMENT of the texts and runs at least MIN_SPEEDUP times fp32's rate; fp32 where none does. On the
bench's 12-layer model bf16 ran 1.9x fp32 (AVX512-BF16) and int8 2.05x, top labels unchanged (docs/performance.md):
worth having, but only where the model's own texts say its answers hold.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.inference.quantize import labelled, quantize_export, scored
from paddle_ft.runtime import cpu_supports_bf16

MAX_DROP = 0.5  # accuracy points
MIN_AGREEMENT = 0.99
MIN_SPEEDUP = 1.2  # less is within what a shared machine's noise moves
BATCH = 32


@dataclass(frozen=True)
class PrecisionRow:
    precision: str
    accuracy: float
    agreement: float
    """The share of the texts given fp32's answer."""
    texts_per_s: float
    use: str
    """How to run the export at this precision."""

    def keeps_accuracy(self, fp32: PrecisionRow) -> bool:
        return 100 * (fp32.accuracy - self.accuracy) <= MAX_DROP and self.agreement >= MIN_AGREEMENT


@dataclass(frozen=True)
class PrecisionCheck:
    rows: tuple[PrecisionRow, ...]
    """fp32 first, then each reduced precision this CPU runs."""
    texts: int
    skipped: tuple[str, ...]
    """A reduced precision not measured, and why."""

    @property
    def recommended(self) -> PrecisionRow:
        fp32 = self.rows[0]
        fit = [row for row in self.rows[1:]
               if row.keeps_accuracy(fp32) and row.texts_per_s >= MIN_SPEEDUP * fp32.texts_per_s]
        return max(fit, key=lambda row: row.texts_per_s) if fit else fp32

    def lines(self) -> list[str]:
        fp32 = self.rows[0]
        lines = [f"precision check on {self.texts} labelled texts, batches of {BATCH}:"]
        lines += [f"  {row.precision}: accuracy {row.accuracy:.4f} ({100 * (row.accuracy - fp32.accuracy):+.2f} "
                  f"points), fp32's answer on {row.agreement:.2%}, {row.texts_per_s:,.1f} texts/s "
                  f"({row.texts_per_s / fp32.texts_per_s:.2f}x fp32)" for row in self.rows]
        lines += [f"  {reason}" for reason in self.skipped]
        best = self.recommended
        if best is fp32:
            lines.append(f"recommended: fp32 (no reduced precision kept accuracy within {MAX_DROP} points and "
                         f"{MIN_AGREEMENT:.0%} of fp32's answers at {MIN_SPEEDUP}x its speed)")
        else:
            lines.append(f"recommended: {best.precision}, {best.texts_per_s / fp32.texts_per_s:.2f}x fp32 with "
                         f"accuracy held: {best.use}")
        return lines


def check_precisions(export_dir: Path, data: Path, threads: int | None = None) -> PrecisionCheck:
    """Measure fp32, bf16 (where the CPU has it) and int8 on the labelled file `data`."""
    fp32_predictor = Predictor(export_dir, PredictOptions(cpu_threads=threads, batch_size=BATCH))
    examples = labelled(data, fp32_predictor.meta)
    fp32, fp32_answers = _measured(fp32_predictor, examples, None)
    rows, skipped = [_row("fp32", fp32, "the default")], []
    if cpu_supports_bf16():
        bf16 = Predictor(export_dir, PredictOptions(precision="bf16", backend="paddle", cpu_threads=threads,
                                                    batch_size=BATCH))
        rows.append(_row("bf16", _measured(bf16, examples, fp32_answers)[0],
                         f"predict/serve --precision bf16 --export {export_dir}"))
    else:
        skipped.append("bf16: not measured, this CPU has neither AVX512-BF16 nor AMX-BF16")
    with tempfile.TemporaryDirectory() as folder:
        int8_dir = Path(folder) / "int8"
        quantize_export(export_dir, data, int8_dir, max_drop=100.0, min_agreement=0.0)  # judged here, not there
        int8 = Predictor(int8_dir, PredictOptions(cpu_threads=threads, batch_size=BATCH))
        rows.append(_row("int8", _measured(int8, examples, fp32_answers)[0],
                         f"paddle_ft quantize --export {export_dir} --data {data} --output {export_dir}-int8, "
                         f"then predict/serve --export {export_dir}-int8"))
    return PrecisionCheck(tuple(rows), len(examples), tuple(skipped))


def _measured(predictor: Predictor, examples: list, reference: list | None) -> tuple[dict, list]:
    """({accuracy, agreement with `reference` (1 without one), texts_per_s}, the answers), the texts run in
    batches of BATCH after one unmeasured batch (its shapes' first calls build kernels)."""
    predictor.predict([e.text for e in examples[:BATCH]])
    started = time.perf_counter()
    accuracy, answers = scored(predictor, examples)
    seconds = time.perf_counter() - started
    agreement = 1.0 if reference is None else sum(a == b for a, b in zip(answers, reference)) / len(answers)
    return {"accuracy": accuracy, "agreement": agreement, "texts_per_s": len(examples) / seconds}, answers


def _row(precision: str, measured: dict, use: str) -> PrecisionRow:
    return PrecisionRow(precision, measured["accuracy"], measured["agreement"], measured["texts_per_s"], use)
