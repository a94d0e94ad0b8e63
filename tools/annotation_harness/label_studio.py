"""A real Label Studio, started as a user starts it: `label-studio start` without a browser on a free loopback port,
its SQLite database in a folder the caller owns, a user and an API token made for it. It is driven through its SDK
(label_studio_driver.py, in Label Studio's own environment) and only that process is stopped."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from bench.server_process import free_port, wait_until_answering

from paddle_ft.io import open_own_file

ROOT = Path(__file__).resolve().parents[2]
TOOL_BIN = ROOT / ".venv-label-studio" / "bin"
USER, PASSWORD = "annotator@example.com", "paddle-ft-test"
TOKEN = "paddle-ft-test-token-0123456789"  # made for the test's user; legacy tokens are switched on for it
START_TIMEOUT = 120.0  # a first start migrates a new SQLite database: ~30 s on 2 cores


NOT_INSTALLED = ("Label Studio is not installed here: `make test` installs it into .venv-label-studio "
                 "(label-studio 1.23.2, its own environment)")


def installed() -> bool:
    return (TOOL_BIN / "label-studio").is_file()


class LabelStudio:
    """The running tool (`url`), and `call(op, **arguments)` to act in it through the SDK."""

    def __init__(self, folder: Path, **environment: str):
        if not installed():
            raise RuntimeError(NOT_INSTALLED)
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "label-studio.log"
        env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(folder / "data"), "SENTRY_DSN": "",
               "FRONTEND_SENTRY_DSN": "", "COLLECT_ANALYTICS": "false", **environment}
        with open_own_file(self.log) as out:
            self.process = subprocess.Popen(
                [str(TOOL_BIN / "label-studio"), "start", "--no-browser", "--internal-host", "127.0.0.1",
                 "--port", str(self.port), "--username", USER, "--password", PASSWORD,
                 "--user-token", TOKEN, "--enable-legacy-api-token"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.driver = None
        try:
            wait_until_answering(f"{self.url}/health", [self.process], "label-studio", self.log, START_TIMEOUT)
            driver = Path(__file__).with_name("label_studio_driver.py")
            self.driver = subprocess.Popen([str(TOOL_BIN / "python"), str(driver), self.url, TOKEN],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")
        except BaseException:
            self.stop()
            raise

    def call(self, op: str, **arguments):
        """An operation of label_studio_driver.py; its value, or AssertionError with the tool's refusal."""
        self.driver.stdin.write(json.dumps({"op": op, **arguments}, ensure_ascii=False) + "\n")
        self.driver.stdin.flush()
        answer = json.loads(self.driver.stdout.readline())
        assert "error" not in answer, f"Label Studio refused {op}: {answer['error']}\n{answer.get('trace')}"
        return answer["ok"]

    def stop(self) -> None:
        for process in (self.driver, self.process):
            if process is None or process.poll() is not None:
                continue
            if process is self.driver:
                process.stdin.close()
            else:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
