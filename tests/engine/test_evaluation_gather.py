"""Issue 67: a data-parallel evaluation of thousands of labels gathered every rank's float32 logits through pickle.
Where the report needs no more, each rank ships each row's top label and probability, and the report is the same."""
import pickle

import numpy as np
import pytest

from paddle_ft.data.features import Features
from paddle_ft.engine.metrics import Answers
from paddle_ft.engine.objectives.classification import Classification


def scored(rows: int, labels: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((rows, labels)) * 3).astype(np.float32)
    gold = np.where(rng.random(rows) < 0.7, logits.argmax(axis=1), rng.integers(0, labels, rows))
    features = Features(input_ids=[np.array([1, 2])] * rows, token_type_ids=[np.array([0, 0])] * rows, labels=gold)
    parts = [(np.arange(rank, rows, 2), logits[rank::2]) for rank in (0, 1)]  # two ranks, every other row
    return features, parts


@pytest.mark.parametrize("decision", [{}, {"target_coverage": 0.8}, {"abstain_below": 0.5}])
def test_the_report_of_shipped_answers_is_the_report_of_the_logits(decision):
    labels = [f"label-{i}" for i in range(50)]
    objective = Classification(tuple(labels), 0, **decision)
    features, parts = scored(301, len(labels))
    shipped = [objective.shipped(part, features) for part in parts]
    assert all(isinstance(answers, Answers) for _, answers in shipped)
    assert objective.report(features, shipped) == objective.report(features, parts)


def test_what_needs_the_logits_still_ships_them():
    features, parts = scored(40, 5)
    for objective in (Classification(("a", "b", "c", "d", "e"), 0, calibration="temperature"),):
        assert objective.shipped(parts[0], features) is parts[0]
    windows = Features(features.input_ids, features.token_type_ids, features.labels, documents=np.arange(40) // 2)
    assert Classification(("a", "b", "c", "d", "e"), 0).shipped(parts[0], windows) is parts[0]


def test_twenty_thousand_labels_ship_some_twenty_bytes_a_row_not_eighty_thousand():
    objective = Classification(tuple(str(i) for i in range(20_000)), 0)
    features, parts = scored(200, 20_000)
    full, answers = len(pickle.dumps(parts[0])), len(pickle.dumps(objective.shipped(parts[0], features)))
    # a row: its index (8 bytes, in both), its label (8) and probability (4), against 20,000 float32 logits
    assert full > 100 * 80_000 and answers < 100 * 24 and full / answers > 3_000
