"""Hot reload: SIGHUP makes the server check the model its export folder holds now and swap it in; 2,000 requests
across 3 reloads get no error and every answer comes whole from the one model the response names; a corrupted
export is refused and the old model keeps answering."""
import os
import shutil
import signal
import threading
import time

import httpx
import pytest
from bench.server_process import ServerProcess
from conftest import export_tiny_model, synthetic_rows

from paddle_ft.inference.predictor import Predictor

pytestmark = pytest.mark.slow  # a server, and 2,000 requests


def point(link, target) -> None:
    """Make `link` name `target`, atomically (a new symlink renamed over the old one)."""
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    os.replace(fresh, link)


def current_model(url: str) -> str:
    return httpx.get(f"{url}/v1/model").json()["model"]


def reload(server, expected_change: bool, previous: str) -> str:
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while expected_change and current_model(server.url) == previous:
        assert time.monotonic() < deadline, "the reload did not happen within 60 s"
        time.sleep(0.05)
    return current_model(server.url)


def test_reloads_under_load_lose_nothing_and_a_corrupted_model_is_refused(tmp_path):
    exports = [export_tiny_model(tmp_path / name, seed=seed) for name, seed in (("a", 5), ("b", 6))]
    texts = [text for text, _ in synthetic_rows(50, seed=8)]
    expected = [[(p.label, p.score) for p in Predictor(export).predict(texts)] for export in exports]
    link = tmp_path / "serving"
    point(link, exports[0])
    server = ServerProcess(link, tmp_path / "server.log", "--threads", "1")
    try:
        versions = [current_model(server.url)]
        answers, errors, sent = [], [], iter(range(2000))

        def client(worker: int) -> None:
            with httpx.Client(timeout=60) as http:
                for i in sent:
                    text = i % len(texts)
                    response = http.post(f"{server.url}/v1/classify", json={"texts": [texts[text]]})
                    if response.status_code != 200:
                        errors.append(response.status_code)
                        continue
                    body = response.json()
                    answers.append((body["model"], text, body["results"][0]["label"], body["results"][0]["score"]))

        clients = [threading.Thread(target=client, args=(w,)) for w in range(8)]
        for thread in clients:
            thread.start()
        for target in (exports[1], exports[0], exports[1]):  # three reloads while the clients run
            while len(answers) < 400 * len(versions):
                time.sleep(0.01)
            point(link, target)
            versions.append(reload(server, True, versions[-1]))
        for thread in clients:
            thread.join()
        assert errors == [] and len(answers) == 2000
        assert versions[0] == versions[2] != versions[1] == versions[3]
        by_version = {versions[0]: expected[0], versions[1]: expected[1]}
        assert {model for model, *_ in answers} == set(by_version)  # both served, nothing else
        wrong = [(model, text) for model, text, label, score in answers
                 if by_version[model][text][0] != label or abs(by_version[model][text][1] - score) > 1e-5]
        assert wrong == []  # each answer is the one its named model gives

        corrupted = shutil.copytree(exports[0], tmp_path / "corrupted")
        weights = bytearray((corrupted / "model.pdiparams").read_bytes())
        weights[len(weights) // 2] ^= 1
        (corrupted / "model.pdiparams").write_bytes(bytes(weights))
        point(link, corrupted)
        reload(server, False, versions[-1])
        deadline = time.monotonic() + 60
        while 'paddle_ft_model_reloads_total{result="refused"} 1.0' not in httpx.get(f"{server.url}/metrics").text:
            assert time.monotonic() < deadline, "the corrupted model was neither refused nor swapped in 60 s"
            time.sleep(0.05)
        assert current_model(server.url) == versions[-1]
        response = httpx.post(f"{server.url}/v1/classify", json={"texts": [texts[0]]}).json()
        assert response["model"] == versions[-1]
        metrics = httpx.get(f"{server.url}/metrics").text
        assert 'paddle_ft_model_reloads_total{result="swapped"} 3.0' in metrics
        assert 'paddle_ft_model_reloads_total{result="refused"} 1.0' in metrics
    finally:
        assert server.stop() == 0
    log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert "error: reload refused, " in log and "model.pdiparams has changed since it was written" in log
