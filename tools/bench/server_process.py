"""A serving process on a free loopback port: started, waited for until ready, stopped with SIGTERM.
Used by tools/loadtest.py and the tests, which talk to a real server, never to the app in-process."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from paddle_ft.io import open_own_file


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ready(url: str, process: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    """Poll `url`/readyz until it answers 200; RuntimeError if `process` exits or `timeout` passes first."""
    wait_until_answering(f"{url}/readyz", [process], "the server", log, timeout)


def wait_until_answering(url: str, processes: list[subprocess.Popen], name: str, log: Path,
                         timeout: float = 120.0) -> None:
    """Poll `url` until it answers 200; RuntimeError naming `name` (with the end of `log`) if one of `processes`
    exits, or if `timeout` passes first."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = next((p for p in processes if p.poll() is not None), None)
        if dead is not None:
            raise RuntimeError(f"{name} exited with {dead.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{name} was not ready in {timeout:.0f} s; see {log}")


class ServerProcess:
    def __init__(self, export_dir: str | Path, log: Path, *options: str, ready_timeout: float = 120.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open_own_file(log) as out:
            # the package's own entry point: works from a checkout and from an installed wheel alike
            self.process = subprocess.Popen([sys.executable, "-m", "paddle_ft", "serve", "--export", str(export_dir),
                                             "--host", "127.0.0.1", "--port", str(self.port), *options],
                                            stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until_ready(self.url, self.process, log, ready_timeout)
        except RuntimeError:
            self.stop()
            raise

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code (0 after a clean drain)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)
