"""`PredictOptions`: how an export is run and how its answers are given, one typed object that the command line, the
Python API (`Classifier`), the server and the Ray path build and hand to the `Predictor`."""
from __future__ import annotations

from dataclasses import dataclass

from paddle_ft.arguments import require_int
from paddle_ft.errors import UserError
from paddle_ft.text import TRUNCATIONS


@dataclass(frozen=True)
class PredictOptions:
    # the engine, chosen when the export is loaded
    device: str = "cpu"
    """cpu or gpu."""
    cpu_threads: int | None = None
    """Threads of a CPU engine (None: the usable cores)."""
    precision: str = "fp32"
    """fp32; bf16 on a CPU that has it; fp16 on a GPU."""
    backend: str | None = None
    """paddle (Paddle Inference), onnxruntime, or auto/None: each call on the engine measured fastest at its size."""
    enable_onednn: bool = True
    """Paddle Inference's oneDNN kernels on CPU."""
    gpu_id: int = 0
    use_tensorrt: bool = False
    one_off: bool = False
    """A few calls and done (`predict` of a short input): backend auto measures no route at load and warms no engine
    up; an engine opens at its first call, one that no call goes to is never loaded, and where no route was kept
    from an earlier load of the export, ONNX Runtime (the faster on small calls) runs them all. False (a server, a
    long-lived Classifier): every engine of the route is opened and warmed up at load, the route measured if none
    is kept."""
    # the answers, per call
    batch_size: int = 32
    """Texts per engine call."""
    truncation: str | None = None
    """How a text longer than max_length is read (None: as training read it); one of text.TRUNCATIONS."""
    abstain_below: float | None = None
    """A single-label model abstains under this top probability (None: the model's own threshold, if any)."""
    top_k: int | None = None
    """Labels listed per text, best first (None: the top one)."""

    def __post_init__(self):
        require_int("cpu_threads", self.cpu_threads, 1, none_allowed=True)
        require_int("gpu_id", self.gpu_id, 0)
        require_int("batch_size", self.batch_size, 1)
        require_int("top_k", self.top_k, 1, none_allowed=True)
        if self.truncation not in (None, *TRUNCATIONS):
            raise UserError(f"truncation '{self.truncation}': choose one of {', '.join(TRUNCATIONS)}")
