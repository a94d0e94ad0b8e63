"""The traffic's health on /metrics: how far the last `window` texts have moved from the training data (PSI of the
predicted labels against the training labels' shares, PSI of text lengths against the training lengths, both from
the reference the export carries: `paddle_ft.inference.drift`), the confidence histogram, the abstain rate, and the
[UNK] share of a sample of the texts against the training data's. Alert thresholds: docs/operations.md."""
from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np
from prometheus_client import Gauge, Histogram

from paddle_ft.artifacts.manifest import MANIFEST, read_manifest
from paddle_ft.inference.drift import length_shares, psi, text_length

WINDOW = 500  # texts the gauges look back over
MIN_TEXTS = 100  # fewer in the window: the PSI gauges say NaN rather than a number from too few texts
UNK_SAMPLE = 10  # one text in this many is tokenised again for the [UNK] share
CONFIDENCE_BUCKETS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)


class TrafficMonitor:
    def __init__(self, registry, window: int = WINDOW):
        self.window, self._lock = window, threading.Lock()
        self._reference, self._reference_of = None, None
        self._labels, self._lengths, self._abstained = deque(maxlen=window), deque(maxlen=window), deque(maxlen=window)
        self._unknown, self._seen = deque(maxlen=window), 0
        self.confidence = Histogram("paddle_ft_confidence", "Top probability of each answer",
                                    buckets=CONFIDENCE_BUCKETS, registry=registry)
        gauges = {"paddle_ft_drift_label_psi": ("PSI of the window's predicted labels against the training labels",
                                                self.label_psi),
                  "paddle_ft_drift_length_psi": ("PSI of the window's text lengths against the training texts'",
                                                 self.length_psi),
                  "paddle_ft_window_texts": ("Texts in the window the drift gauges look at",
                                             lambda: len(self._labels)),
                  "paddle_ft_abstain_rate": ("Share of the window's answers that abstained (NaN: no threshold)",
                                             self.abstain_rate),
                  "paddle_ft_unknown_token_share": ("[UNK] share of the window's sampled texts", self.unknown_share),
                  "paddle_ft_reference_unknown_token_share": ("[UNK] share of the training texts",
                                                              lambda: self._reference_value("unknown_token_share"))}
        for name, (description, read) in gauges.items():
            Gauge(name, description, registry=registry).set_function(read)

    def observe(self, predictor, items: list[tuple[str, str | None]], predictions: list) -> None:
        """The answers of one request, by the predictor that gave them."""
        self._use_reference_of(predictor)
        with self._lock:
            for (text, pair), prediction in zip(items, predictions):
                ranked = prediction.top(1)[0]
                self.confidence.observe(ranked[1])
                self._labels.append(ranked[0])
                self._lengths.append(text_length(text, pair))
                self._abstained.append(prediction.abstained)
                self._seen += 1
                if self._seen % UNK_SAMPLE == 1:
                    ids = predictor.tokenizer([text], text_pair=[pair] if pair is not None else None)["input_ids"][0]
                    unk = predictor.tokenizer.unk_token_id
                    self._unknown.append((sum(i == unk for i in ids), len(ids)))

    def _use_reference_of(self, predictor) -> None:
        """The reference of the export answering now; the window starts afresh when a reload brings another."""
        if self._reference_of is predictor:
            return
        manifest = read_manifest(predictor.export_dir) if (predictor.export_dir / MANIFEST).is_file() else {}
        with self._lock:
            self._reference, self._reference_of = manifest.get("reference"), predictor
            for window in (self._labels, self._lengths, self._abstained, self._unknown):
                window.clear()

    def _reference_value(self, key: str) -> float:
        return math.nan if self._reference is None else float(self._reference[key])

    def label_psi(self) -> float:
        with self._lock:
            if self._reference is None or len(self._labels) < MIN_TEXTS:
                return math.nan
            names = self._reference["labels"]
            live = np.array([sum(label == name for label in self._labels) for name in names], dtype=np.float64)
            return psi(live / len(self._labels), self._reference["label_shares"])

    def length_psi(self) -> float:
        with self._lock:
            if self._reference is None or len(self._lengths) < MIN_TEXTS:
                return math.nan
            return psi(length_shares(list(self._lengths), self._reference["length_edges"]),
                       self._reference["length_shares"])

    def abstain_rate(self) -> float:
        with self._lock:
            decided = [a for a in self._abstained if a is not None]
            return math.nan if not decided else sum(decided) / len(decided)

    def unknown_share(self) -> float:
        with self._lock:
            tokens = sum(n for _, n in self._unknown)
            return math.nan if not tokens else sum(u for u, _ in self._unknown) / tokens
