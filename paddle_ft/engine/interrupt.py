"""Turn SIGTERM / Ctrl-C into a request to stop after the current step (and save)."""
from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from paddle_ft.errors import UserError


class TrainingInterrupted(UserError):
    """Training stopped on a signal after saving a checkpoint; the message says how to resume."""

    def __init__(self, signal_number: int, step: int, checkpoint: Path | None,
                 resume_command: str = "the same command with -o train.resume=auto"):
        self.signal_number, self.step, self.checkpoint = signal_number, step, checkpoint
        if checkpoint is None:  # train.checkpoints.keep 0
            super().__init__(f"stopped by signal {signal_number} after step {step}; nothing was saved "
                             "(train.checkpoints.keep is 0), so the run starts over when run again")
        else:
            super().__init__(f"stopped by signal {signal_number} after step {step}; saved {checkpoint}. Resume with: "
                             f"{resume_command}")
        self.exit_code = 128 + signal_number

    def with_resume_command(self, command: str) -> TrainingInterrupted:
        """The same stop, saying the exact command that resumes it (the engine does not know it)."""
        return TrainingInterrupted(self.signal_number, self.step, self.checkpoint, command)


class StopRequests:
    """While active, SIGTERM and SIGINT set `.signal` instead of killing the process; a second
    Ctrl-C, for a user who does not want to wait, ends the process at once with status 130.

    Not by raising KeyboardInterrupt: raised inside Paddle's backward (a PyLayer) it comes out as an
    OSError with a C++ traceback and status 1. Ending at once loses nothing: every checkpoint and
    best/ write is atomic, and a resume cleans up a write it cut short."""

    def __init__(self):
        self.signal: int | None = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal == signal.SIGINT and signum == signal.SIGINT:
            os.write(2, b"interrupted again: stopped at once without saving; resume from the last complete "
                        b"checkpoint with -o train.resume=auto\n")
            os._exit(128 + signal.SIGINT)
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
