"""The training objectives: what the loop asks of a task (`Objective`). One module each: classification,
multi-label, masked-language modelling, ELECTRA's replaced-token detection, distillation."""
from __future__ import annotations


class Objective:
    """What the training loop asks of a task: `loss` of some training examples, `score` (this process's part of
    an evaluation), `report` (the metrics of the gathered parts), and `calibrated`."""

    metrics: tuple[str, ...] = ()
    """The report's metrics that can pick the best model (higher is better)."""

    def prepare(self, model, autocast) -> None:
        """Called before the model is scored or saved: what the head takes from the training rows rather than from
        gradients (the few-shot recipe's prototypes). Most objectives take nothing."""

    def shipped(self, part, features):
        """What of this process's scored part a data-parallel evaluation gathers: the part itself, unless an
        objective needs less of it."""
        return part

    def calibrated(self, dev_report: dict | None) -> Objective:
        """The objective with what the dev evaluation decided fixed, for scoring test and saving the model (dev
        None: there was none). Most objectives decide nothing."""
        return self
