"""A real doccano (1.8.4) as a user runs it: its database made (`doccano init`), two users, its web server and its
task worker (imports and exports run there), in a folder the caller owns. `doccano webserver` listens on every
interface, so the web server is gunicorn on the same application bound to loopback. Acted in through its REST API as
its web page does (`call`)."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import httpx
from bench.server_process import free_port, wait_until_answering

from paddle_ft.io import open_own_file

ROOT = Path(__file__).resolve().parents[2]
TOOL_BIN = ROOT / ".venv-doccano" / "bin"
PASSWORD = "paddle-ft-test"
NOT_INSTALLED = "doccano is not installed here: `make test` installs it into .venv-doccano (doccano 1.8.4)"
START_TIMEOUT = 90.0


def installed() -> bool:
    return (TOOL_BIN / "doccano").is_file()


def _backend() -> Path:
    """doccano's Django project inside its environment (its `cli.py` runs from there)."""
    return next((TOOL_BIN.parent / "lib").glob("python3*/site-packages/backend"))


class Doccano:
    def __init__(self, folder: Path, users: tuple[str, ...] = ("admin", "second")):
        if not installed():
            raise RuntimeError(NOT_INSTALLED)
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        home = folder / "doccano"
        self.env = {**os.environ, "DOCCANO_HOME": str(home), "STANDALONE": "True",
                    "DJANGO_SETTINGS_MODULE": "config.settings.production",
                    "DATABASE_URL": f"sqlite:///{home / 'db.sqlite3'}", "MEDIA_ROOT": str(home / "media")}
        self.processes: list[subprocess.Popen] = []
        self.log = folder / "doccano.log"
        with open_own_file(self.log) as out:
            for command in (["init"], *(["createuser", "--username", user, "--password", PASSWORD] for user in users)):
                subprocess.run([str(TOOL_BIN / "doccano"), *command], env=self.env, stdout=out, stderr=out, check=True)
        try:
            self._start(folder)
            self.clients = {user: self._login(user) for user in users}
        except BaseException:
            self.stop()
            raise

    def _start(self, folder: Path) -> None:
        backend = str(_backend())
        for name, command in (
                ("web", [str(TOOL_BIN / "gunicorn"), "--chdir", backend, "-b", f"127.0.0.1:{self.port}", "-w", "1",
                         "config.wsgi"]),
                ("worker", [str(TOOL_BIN / "celery"), "--app=config", f"--workdir={backend}", "worker",
                            "--concurrency=1", "--loglevel=warning"])):
            with open_own_file(folder / f"doccano-{name}.log") as out:
                self.processes.append(subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                                       stderr=subprocess.STDOUT))
        wait_until_answering(f"{self.url}/v1/health/", self.processes, "doccano", folder / "doccano-web.log",
                             START_TIMEOUT)

    def _login(self, user: str) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=60)
        response = client.post("/v1/auth/login/", json={"username": user, "password": PASSWORD})
        response.raise_for_status()
        client.cookies.clear()  # token auth alone: a session cookie would ask for a CSRF token
        client.headers["Authorization"] = f"Token {response.json()['key']}"
        return client

    def call(self, method: str, path: str, user: str = "admin", **kwargs):
        response = self.clients[user].request(method, path, **kwargs)
        assert response.status_code < 400, f"doccano refused {method} {path}: {response.status_code} {response.text}"
        return response.json() if "json" in response.headers.get("content-type", "") else response.content

    def wait_for_task(self, task_id: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.call("GET", f"/v1/tasks/status/{task_id}")
            if status.get("ready"):  # an import's result lists its errors; an export's is the file's name
                result = status.get("result")
                assert not status.get("error") and not (isinstance(result, dict) and result.get("error")), status
                return
            time.sleep(0.3)
        raise AssertionError(f"doccano's task {task_id} did not end within {timeout:.0f} s")

    def create_project(self, name: str, labels: tuple[str, ...], collaborative: bool, single_label: bool) -> tuple:
        """A document-classification project with `labels`, "second" a member annotator: (id, {label: its id})."""
        project = self.call("POST", "/v1/projects", json={
            "name": name, "description": name, "guideline": "", "project_type": "DocumentClassification",
            "resourcetype": "TextClassificationProject", "collaborative_annotation": collaborative,
            "single_class_classification": single_label})["id"]
        roles = {role["name"]: role["id"] for role in self.call("GET", "/v1/roles")}
        second = next(u["id"] for u in self.call("GET", "/v1/users", params={"q": "second"})
                      if u["username"] == "second")
        self.call("POST", f"/v1/projects/{project}/members", json={"user": second, "role": roles["annotator"]})
        ids = {label: self.call("POST", f"/v1/projects/{project}/category-types", json={"text": label})["id"]
               for label in labels}
        return project, ids

    def import_file(self, project: int, path: Path) -> list[dict]:
        """A JSONL file imported as the page's Import does (uploaded, then read by the worker); the examples."""
        upload = self.clients["admin"].post("/v1/fp/process/", files={"filepond": (path.name, path.read_bytes())})
        upload.raise_for_status()
        task = self.call("POST", f"/v1/projects/{project}/upload", json={
            "uploadIds": [upload.text], "format": "JSONL", "task": "DocumentClassification", "column_data": "text",
            "column_label": "label", "delimiter": "", "encoding": "utf_8"})["task_id"]
        self.wait_for_task(task)
        return self.call("GET", f"/v1/projects/{project}/examples", params={"limit": 1000})["results"]

    def export(self, project: int, path: Path) -> dict[str, str]:
        """The project exported as JSONL as the page's Export does: the ZIP written to `path`; its files' text."""
        task = self.call("POST", f"/v1/projects/{project}/download", json={"format": "JSONL",
                                                                           "exportApproved": False})["task_id"]
        self.wait_for_task(task)
        path.write_bytes(self.call("GET", f"/v1/projects/{project}/download", params={"taskId": task}))
        with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as archive:
            return {name: archive.read(name).decode("utf-8") for name in archive.namelist()}

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


