"""Drift gauges: the export carries the training side (label shares, length bins, [UNK] share); replaying the test
split keeps the PSI gauges near 0, and a stream of one class, or of texts of another length, crosses the alert
threshold (docs/operations.md) within the number of requests the docs give."""
import json

import httpx
import numpy as np
import pytest
from bench.server_process import ServerProcess
from conftest import DEMO, LABELS, overrides, synthetic_rows, tiny_run_args, write_splits, write_vocab

from paddle_ft.cli import main
from paddle_ft.inference.drift import PSI_ALERT, PSI_WATCH, psi

pytestmark = pytest.mark.slow  # a training, an export and a server


def gauge(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_psi_is_zero_for_the_same_shares_and_grows_with_the_shift():
    assert psi([0.5, 0.5], [0.5, 0.5]) == 0
    shifted = [psi([share, 1 - share], [0.5, 0.5]) for share in (0.55, 0.7, 0.8)]
    assert 0 < shifted[0] < PSI_WATCH < shifted[1] < PSI_ALERT < shifted[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("drift")
    data = write_splits(root / "data", (240, 60, 200))
    assert main(["train", "--config", DEMO, *overrides(tiny_run_args(data, write_vocab(root / "vocab.txt"),
                                                                     root / "run"))]) == 0
    assert main(["export", "--model", str(root / "run" / "best"), "--output", str(root / "export")]) == 0
    server = ServerProcess(root / "export", root / "server.log", "--threads", "1")
    yield server, data, root / "export"
    assert server.stop() == 0


def test_the_export_carries_the_training_side(served):
    _, _, export = served
    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    reference = manifest["reference"]
    assert reference["labels"] == list(LABELS) and reference["label_shares"] == [0.5, 0.5]  # 240 rows, alternating
    assert len(reference["length_shares"]) == len(reference["length_edges"]) + 1
    assert sum(reference["length_shares"]) == pytest.approx(1)
    assert 0 <= reference["unknown_token_share"] < 0.01  # the vocabulary holds every character of the corpus


def test_the_test_split_stays_near_zero_and_one_class_crosses_the_alert_threshold(served):
    server, data, _ = served
    test = [line.split("\t") for line in (data / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    with httpx.Client(timeout=30) as http:
        for text, _ in test:
            assert http.post(f"{server.url}/v1/classify", json={"texts": [text]}).status_code == 200
        assert gauge(server.url, "paddle_ft_window_texts") == 200
        assert gauge(server.url, "paddle_ft_drift_label_psi") < PSI_WATCH
        assert gauge(server.url, "paddle_ft_drift_length_psi") < PSI_WATCH
        positive = [text for text, label in test if label == "正面"]
        for sent in range(1, 301):
            http.post(f"{server.url}/v1/classify", json={"texts": [positive[sent % len(positive)]]})
            if gauge(server.url, "paddle_ft_drift_label_psi") > PSI_ALERT:
                break
        assert gauge(server.url, "paddle_ft_drift_label_psi") > PSI_ALERT
        # docs/operations.md: after 200 test-like texts, one class alone crosses 0.25 within 250 requests (227 here)
        assert sent <= 250, sent
        long_texts = ["".join(text for text, _ in synthetic_rows(8, seed=i)) for i in range(300)]  # ~180 chars
        for text in long_texts:
            http.post(f"{server.url}/v1/classify", json={"texts": [text]})
        assert gauge(server.url, "paddle_ft_drift_length_psi") > PSI_ALERT
    lengths = np.array([len(t) for t in long_texts])
    assert lengths.min() > 40  # longer than any training text (4 to 40 characters)
