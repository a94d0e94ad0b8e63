"""Turn SIGTERM / Ctrl-C into a request to stop after the current step (and save)."""
from __future__ import annotations

import signal
import threading

from paddle_ft.errors import UserError


class TrainingInterrupted(UserError):
    """Training stopped on a signal after saving a checkpoint; the message says how to resume."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number


class StopRequests:
    """While active, SIGTERM and SIGINT set `.signal` instead of killing the process; a second
    Ctrl-C falls back to the usual KeyboardInterrupt for a user who does not want to wait."""

    def __init__(self):
        self.signal: int | None = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signals only reach the main thread
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False
