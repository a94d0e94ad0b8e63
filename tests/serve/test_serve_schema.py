"""Schemathesis against the running server's own /openapi.json: every generated request, valid or not,
gets a documented status with the documented JSON shape, and never a 5xx. Bounded in time, loopback only."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench.server_process import ServerProcess
from conftest import export_tiny_model

pytestmark = pytest.mark.slow
BUDGET_SECONDS = 20  # Schemathesis' coverage phase, then fuzzing until the budget is spent (about 1,300 requests here)


def test_every_generated_request_gets_a_documented_answer(tmp_path):
    schemathesis = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert schemathesis, "schemathesis is part of the test extra: pip install -e '.[test]'"
    server = ServerProcess(export_tiny_model(tmp_path / "model"), tmp_path / "server.log", "--threads", "1",
                           "--max-texts", "16")
    try:
        done = subprocess.run([schemathesis, "run", f"{server.url}/openapi.json", "--checks", "all", "--seed", "1",
                               "--workers", "1", "--max-time", str(BUDGET_SECONDS), "--no-color",
                               "--generation-database", "none", "--report", "ndjson", "--report-dir",
                               str(tmp_path / "report")],
                              capture_output=True, text=True, timeout=BUDGET_SECONDS + 120,
                              cwd=tmp_path)  # its cache folder goes there, not into the checkout
    finally:
        assert server.stop() == 0
    summary = done.stdout[-3000:]
    assert done.returncode == 0 and "No issues found" in summary, summary
    assert "error:" not in (tmp_path / "server.log").read_text()  # no request crashed a handler
