"""`backend: auto`: which engine runs a call, by its batch size, from a crossover measured on the export at load.

Why per call: on CPU at fp32, ONNX Runtime wins small calls (Paddle Inference pays ~70 us of fixed cost per oneDNN
primitive, see docs/performance.md) while Paddle Inference can win large batches of long texts (ONNX Runtime's
attention slows more with the length); where they cross depends on the model, the thread count and the CPU (two
machines of one kind disagreed at batch 32). So the `Predictor` times the engines on its own export when it loads
(which also warms them), at a few batch sizes, each at the width such a call usually has (a lone text is short, a
batch is padded to its longest text), and fits one crossover: one engine below a batch size, another from it (or one
throughout), whichever split loses the least time against the fastest engine at every measured size. One crossover,
because fixed costs per call favour one engine and throughput another; fitting it rather than taking each size's
winner keeps one noisy measurement (a shared machine) from sending a single size to the slower engine.
"""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from paddle_ft.io import user_cache_folder, write_text_atomically

# (batch size, tokens per text) of the measured calls, the width capped at the model's max_length; a crossover placed
# within a factor of 4 costs little (the engines' times are close near it). One width for all sizes was not enough:
# at 64 tokens ONNX Runtime looked the faster at batch 16 and was 0.9x Paddle Inference on the bench's batches of 8
# texts padded to ~120; at 128 Paddle Inference looked the faster at batch 1 and was 0.63x ONNX Runtime on single
# texts of ~40 tokens. The rows of a call have lengths spread evenly up to its width, the rest padding, as a batch of
# texts of mixed lengths has (`padded_call`): at e5-small's shape ONNX Runtime ran 32 x 128 without padding 1.15-1.2x
# as fast as with the bench's texts' padding (47%), where Paddle Inference's rate did not move, and a route measured
# without padding sent batch 32 to ONNX Runtime, 0.76x Paddle Inference on the bench's texts. The largest size is
# the default batch (32): at 64 x 128 Paddle Inference slowed to 0.75x its batch-32 rate per text, which misjudged
# the batch-32 calls
MEASURED_CALLS = ((1, 32), (4, 64), (8, 128), (16, 128), (32, 128))
# each engine's time at a size is the median of its best calls in PASSES passes over all the sizes, each pass making
# one round of calls at a size, or more (up to MAX_ROUNDS) while the pass has spent less than PASS_BUDGET_S on it: a
# shared machine's slow spells spoil calls for a while, and one spell covering every call of a size sent a bench's
# batch-1 calls to an engine 0.63x as fast (ONNX Runtime measured at 7.1 ms, 4.1 ms in steady use); the passes spread
# a size's calls over the whole measurement, so a spell spoils one pass, which the median leaves out. (The best call
# over all passes would judge an engine by its luckiest call: ONNX Runtime, whose calls vary the most, tied Paddle
# Inference at 8 x 128 that way and ran the bench's batches of 8 at 0.84x its speed.) In a round each engine makes
# BURST calls in a row and only the last counts: the first call after another engine's pays for that engine's
# threads still spinning, which in steady use (one engine for a run of similar calls) it would not
PASSES, MAX_ROUNDS, PASS_BUDGET_S, BURST = 3, 7, 0.04, 2
STOP_AFTER_S = 0.25  # a size whose call would take longer (predicted from the last measured size by its tokens) is
# measured in one pass of one counted call per engine (after its unmeasured first), not in PASSES of bursts: a
# 12-layer model's batches of 8 and 16 texts take 0.3-0.6 s a call, where a call that long varies little and the
# passes' six calls per engine would add ten seconds to the first load of an export; without them its route measured
# batches 1 and 4 only and sent batch 32 to ONNX Runtime, 0.94x Paddle Inference there (e5-small's shape)
LONG_CALL_S = 1.5  # a size whose call would take longer is not measured, nor the larger ones (a full-size model's
# load would take minutes): larger batches go to the largest measured size's engine

CACHE_VARIABLE = "PADDLE_FT_ROUTE_CACHE"  # where measured routes are kept (default ~/.cache/paddle_ft/routes)

Engine = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Route:
    """The engine for a call of `batch` texts: the crossover's engine at the nearest measured batch size (on a log
    scale)."""

    points: tuple[tuple[int, str], ...]
    """(batch size, the engine the fitted crossover runs there), by batch size."""
    seconds: dict[int, dict[str, float]]
    """The measured time of a call of each batch size on each engine."""

    def engine_for(self, batch: int) -> str:
        return min(self.points, key=lambda point: abs(math.log(point[0] / max(1, batch))))[1]

    def describe(self) -> str:
        """e.g. "onnxruntime below batch 16, paddle from 16": where each engine runs."""
        first, (_, last) = self.points[0][1], self.points[-1]
        if first == last:
            return f"{first} at every batch size"
        switch = next(batch for batch, engine in self.points if engine == last)
        return f"{first} below batch {switch}, {last} from {switch}"

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines it runs calls on, in order of batch size."""
        return tuple(dict.fromkeys(engine for _, engine in self.points))

    def as_dict(self) -> dict:
        return {"points": [{"batch": batch, "engine": engine, "seconds": self.seconds.get(batch, {})}
                           for batch, engine in self.points]}

    @classmethod
    def from_dict(cls, data: dict) -> Route:
        points = tuple((int(point["batch"]), str(point["engine"])) for point in data["points"])
        if not points:
            raise ValueError("a route without a point sends no call anywhere")
        return cls(points, {int(point["batch"]): dict(point["seconds"]) for point in data["points"]})


@dataclass(frozen=True)
class CallCost:
    """The predicted seconds of a call: `fixed` + `per_token` x its padded tokens (batch x width), fitted to the
    calls a route measured. What it is for: where the tokens cost far more than the call (a 12-layer model), a batch
    of texts of mixed lengths runs faster as a few calls of similar lengths than as one padded to its longest (at
    e5-small's shape a batch of 32 review texts was 47% padding); where the call costs more (a small model's fixed
    ~0.1-1 ms), it stays one call."""

    fixed: float
    per_token: float

    @classmethod
    def fit(cls, route: Route, widths: dict[int, int]) -> CallCost | None:
        """Least relative squared error over the measured sizes (the time of the engine the route runs there);
        None where fewer than two sizes were measured or the fit is not a cost (negative)."""
        points = [(batch * widths[batch], route.seconds[batch][engine]) for batch, engine in route.points
                  if batch in widths and engine in route.seconds.get(batch, {})]
        if len({tokens for tokens, _ in points}) < 2:
            return None
        # minimise sum((fixed + per_token * tokens) / seconds - 1)^2: a linear least-squares problem in 1/seconds
        design = np.array([[1 / seconds, tokens / seconds] for tokens, seconds in points])
        (fixed, per_token), *_ = np.linalg.lstsq(design, np.ones(len(points)), rcond=None)
        return cls(max(0.0, float(fixed)), float(per_token)) if per_token > 0 else None

    def split(self, lengths: list[int], batch_size: int) -> list[tuple[int, int]]:
        """(start, end) of each call over texts sorted longest first (`lengths`), at most `batch_size` each, that
        minimise the predicted time: a call's width is its first text's length."""
        best, cut = [0.0] + [math.inf] * len(lengths), [0] * (len(lengths) + 1)
        for end in range(1, len(lengths) + 1):
            for start in range(max(0, end - batch_size), end):
                seconds = best[start] + self.fixed + self.per_token * (end - start) * lengths[start]
                if seconds < best[end]:
                    best[end], cut[end] = seconds, start
        calls, end = [], len(lengths)
        while end > 0:
            calls.append((cut[end], end))
            end = cut[end]
        return calls[::-1]


def measured_calls(max_length: int) -> tuple[tuple[int, int], ...]:
    """MEASURED_CALLS with their widths capped at the model's max_length: what a route is measured on."""
    return tuple((batch, min(width, max_length)) for batch, width in MEASURED_CALLS)


def single_route(engine: str) -> Route:
    """Every call on one engine (the backend was named, or only one can run the export)."""
    return Route(((1, engine),), {})


def measure_route(engines: dict[str, Engine], calls: tuple[tuple[int, int], ...], token_id: int,
                  pad_token_id: int) -> Route:
    """Time every engine at each (batch size, width) of `calls` (the engines taking turns, so that a noisy moment
    hits all; PASSES passes over the sizes, the median of each engine's best calls in them counting), a size whose
    call would take over STOP_AFTER_S on the slowest engine (the last measured size's time scaled by the tokens; the
    first size is always measured) once, up to the first size whose call would take over LONG_CALL_S, and fit the
    crossover."""
    passes: dict[int, dict[str, list[float]]] = {}
    repeated: list[tuple[int, int]] = []  # the sizes of short calls, chosen in the first pass, measured again after
    measured_tokens, slowest = 0, 0.0  # the last size measured, and the slowest engine's call there
    for first_pass in [True] + [False] * (PASSES - 1):
        for batch, width in calls if first_pass else repeated:
            long_call = False
            if first_pass:
                predicted = slowest * batch * width / measured_tokens if measured_tokens else 0.0
                if predicted > LONG_CALL_S:
                    break
                long_call = predicted > STOP_AFTER_S
                if not long_call:
                    repeated.append((batch, width))
            ids = padded_call(batch, width, token_id, pad_token_id)
            times = _pass_times(engines, ids, warm_up=first_pass, burst=1 if long_call else BURST,
                                budget=0.0 if long_call else PASS_BUDGET_S)
            if first_pass:
                measured_tokens, slowest = batch * width, max(times.values())
            for name, took in times.items():
                passes.setdefault(batch, {}).setdefault(name, []).append(took)
    best = {batch: {name: statistics.median(times) for name, times in by_engine.items()}
            for batch, by_engine in passes.items()}
    ordered = sorted(best)
    rounded = {batch: {name: round(value, 6) for name, value in best[batch].items()} for batch in ordered}
    return Route(tuple(zip(ordered, fit_crossover([best[batch] for batch in ordered]))), rounded)


def padded_call(batch: int, width: int, token_id: int, pad_token_id: int) -> np.ndarray:
    """Ids [batch, width] of a measured call: row i of n holds `token_id` for ceil(width * (i + 1) / n) positions and
    padding after them (one row: the whole width; many: about half of the call is padding)."""
    lengths = -(-width * np.arange(1, batch + 1) // batch)
    return np.where(np.arange(width)[None, :] < lengths[:, None], token_id, pad_token_id).astype(np.int64)


def _pass_times(engines: dict[str, Engine], ids: np.ndarray, warm_up: bool, burst: int,
                budget: float) -> dict[str, float]:
    """Each engine's best call in one pass at this size: at least one round of `burst` calls per engine (the last
    counting), more while within `budget` seconds."""
    types = np.zeros_like(ids)
    if warm_up:
        for run in engines.values():
            run(ids, types)  # the first call of a shape builds kernels: not measured
    best, spent, rounds = {name: math.inf for name in engines}, 0.0, 0
    while rounds == 0 or (rounds < MAX_ROUNDS and spent < budget):
        for name, run in engines.items():
            for _ in range(burst):
                started = time.perf_counter()
                run(ids, types)
                took = time.perf_counter() - started
                spent += took
            best[name] = min(best[name], took)
        rounds += 1
    return best


def fit_crossover(times: list[dict[str, float]]) -> list[str]:
    """The engine for each measured size (ascending), switching at most once: of every (engine below, engine from,
    where) the one whose summed time relative to the fastest at each size is least (ties: the first found, one engine
    throughout before a switch)."""
    names = list(times[0])
    best_cost, best_choice = math.inf, None
    for below in names:
        for above in names:
            for split in range(len(times) + 1):
                choice = [below] * split + [above] * (len(times) - split)
                cost = sum(row[name] / min(row.values()) for row, name in zip(times, choice))
                if cost < best_cost - 1e-9:
                    best_cost, best_choice = cost, choice
    return best_choice


def cache_file(export_files: list[Path], threads: int | None) -> Path | None:
    """Where the route measured on these export files, on this CPU with these threads and engine versions, is kept
    (PADDLE_FT_ROUTE_CACHE, default ~/.cache/paddle_ft/routes): a later load of the same export here (the server's
    restart, a long `predict`) takes it instead of measuring for seconds again, and loads only the engines it
    uses. The files count by path, size and modification time: a new export, or a copy, is measured afresh. None
    where there is no home folder to keep it in."""
    import onnxruntime

    from paddle_ft.runtime import SHARED_SPIN_MS, cpu_identity, usable_cores

    folder = user_cache_folder(CACHE_VARIABLE, "routes")
    if folder is None:
        return None
    files = [(str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns) for path in export_files]
    key = json.dumps({"files": files, "cpu": cpu_identity(), "threads": threads, "cores": usable_cores(),
                      "versions": [_paddle_version(), onnxruntime.__version__], "calls": MEASURED_CALLS,
                      "rules": [PASSES, MAX_ROUNDS, PASS_BUDGET_S, BURST, STOP_AFTER_S, LONG_CALL_S,
                                SHARED_SPIN_MS]})
    return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _paddle_version() -> str:
    """The installed Paddle's version, from its package's metadata: importing paddle only to ask would load it (a
    second and ~250 MB) for a route that may never call it."""
    from importlib.metadata import PackageNotFoundError, version

    for package in ("paddlepaddle", "paddlepaddle-gpu"):
        try:
            return version(package)
        except PackageNotFoundError:
            continue
    import paddle  # a build installed some other way

    return paddle.__version__


def read_cached(path: Path | None) -> Route | None:
    """The route kept at `path`; None where there is none (or it is unreadable: it is measured again)."""
    try:
        return Route.from_dict(json.loads(path.read_text(encoding="utf-8"))) if path else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep(path: Path | None, route: Route) -> None:
    """Keep `route` at `path` for the next load; a cache that cannot be written costs only a measurement then."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps(route.as_dict()))
    except OSError:
        pass


# backend auto's engines: ONNX Runtime, and Paddle Inference with oneDNN and without (each was the faster Paddle
# Inference at batch 32 on one machine or another of the same kind: docs/performance.md)
AUTO_ORT, AUTO_ONEDNN, AUTO_PLAIN = "onnxruntime", "paddle", "paddle-without-onednn"
WIDTH_STEP = 16  # Paddle Inference's padded widths are multiples of this (Engines.run_on)


class Engines:
    """The engine(s) an export runs on and the route that picks one per call: one engine when the backend is named
    (or only one can run the request), else (`auto`) the CPU fp32 engines, timed on this export at load, or the
    route measured at an earlier load of it (the cache), keeping only the engines the route calls."""

    def __init__(self, engines: dict[str, Engine], route: Route, pad_token_id: int, max_length: int,
                 openers: dict[str, Callable[[], Engine]] | None = None):
        """`engines`: the open ones; `openers`: how to open each other engine the route may call, at its first call
        (`PredictOptions.one_off`)."""
        self.pad_token_id, self.max_length = pad_token_id, max_length
        self.engines, self.route = engines, route
        self.openers = openers or {}

    @property
    def route(self) -> Route:
        return self._route

    @route.setter
    def route(self, route: Route) -> None:
        # the cost of a call fitted to the route's measured calls (None for a named backend: nothing measured), once
        # per route rather than on every predict call (a request's hot path)
        self._route = route
        self.call_cost: CallCost | None = CallCost.fit(route, dict(measured_calls(self.max_length)))

    def calls(self, lengths: list[int], batch_size: int) -> list[tuple[int, int]]:
        """(start, end) of each engine call over texts sorted longest first: batches of `batch_size`, or, where the
        route measured what a call costs, the split of them that wastes the least time on padding."""
        cost = self.call_cost
        if cost is None:
            return [(start, min(start + batch_size, len(lengths))) for start in range(0, len(lengths), batch_size)]
        return cost.split(lengths, batch_size)

    @classmethod
    def open(cls, backend: str, export_files: list[Path], options, max_length: int, token_ids: tuple[int, int]):
        """`backend` as `backends.choose_backend` settled it; `export_files` (program, params, ONNX graph);
        `token_ids` ([CLS], [PAD]), which the warm-up and the measured calls are made of."""
        from paddle_ft.inference.backends import onnxruntime_engine, paddle_engine

        program, export_dir = export_files[0], export_files[0].parent

        def paddle(onednn: bool):
            return paddle_engine(program, options, onednn, max_length, WIDTH_STEP)

        cls_id, pad_id = token_ids
        if backend != "auto":
            engines = {backend: onnxruntime_engine(export_dir, options.cpu_threads) if backend == "onnxruntime"
                       else paddle(options.enable_onednn)}
            opened = cls(engines, single_route(backend), pad_id, max_length)
            opened.warm_up(cls_id)
            return opened
        cache = cache_file(export_files, options.cpu_threads)
        cached = read_cached(cache)
        if cached and not set(cached.engines) <= {AUTO_ORT, AUTO_ONEDNN, AUTO_PLAIN}:
            cached = None  # kept by another version of paddle_ft, with other engines: measured again
        names = cached.engines if cached else (AUTO_ORT, AUTO_ONEDNN, AUTO_PLAIN)
        openers = {name: partial(onnxruntime_engine, export_dir, options.cpu_threads, spinning=len(names) == 1)
                   if name == AUTO_ORT else partial(paddle, name == AUTO_ONEDNN) for name in names}
        if options.one_off:  # 3 texts of e5-small at its full vocabulary: 2.3 GB and 4 s with the kept route's
            # two engines opened and warmed up, 1.2 GB and 2.5 s with the one its calls use; 2.7 GB and 14 s where
            # the route was measured first
            return cls({}, cached or single_route(AUTO_ORT), pad_id, max_length, openers)
        engines = {name: open_engine() for name, open_engine in openers.items()}
        opened = cls(engines, cached or single_route(names[0]), pad_id, max_length)
        opened.warm_up(cls_id)
        if cached is None:
            opened.route = measure_route({name: partial(opened.run_on, name) for name in engines},
                                         measured_calls(max_length), cls_id, pad_id)
            keep(cache, opened.route)
            # an engine the route never calls only holds memory (a Paddle Inference engine ~100 MB)
            opened.engines = {name: engines[name] for name in opened.route.engines}
            if opened.route.engines == (AUTO_ORT,):  # alone now: its threads may spin between calls again (on
                # e5-small's shape a session that stops them ran batch 8 at 0.93x a spinning one's rate, side by side;
                # equal at batch 32)
                opened.engines = {AUTO_ORT: onnxruntime_engine(export_dir, options.cpu_threads)}
                opened.warm_up(cls_id)  # a new session: its first calls would pay for allocation otherwise
        return opened

    def warm_up(self, token_id: int) -> None:
        """The first run of a shape allocates memory and creates kernels (and TensorRT engines): pay for
        that at load time, for every padded width of a single text, not on the first requests."""
        shapes = [(1, width) for width in range(WIDTH_STEP, self.max_length + WIDTH_STEP, WIDTH_STEP)]
        for batch, width in shapes + [(8, min(64, self.max_length))]:
            ids = np.full((batch, min(width, self.max_length)), token_id, dtype=np.int64)
            for name in self.engines:
                self.run_on(name, ids, np.zeros_like(ids))

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        """Logits [batch, num_classes] for padded ids [batch, seq] int64, from the engine the route picks."""
        return self.run_on(self.route.engine_for(len(input_ids)), input_ids, token_type_ids)

    def run_on(self, engine: str, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        """For Paddle Inference the width is padded further to a multiple of WIDTH_STEP (pad positions are
        masked, so the logits do not change): oneDNN then reuses a few kernel shapes instead of building new
        ones for every length, about a third off the latency of a single text here. ONNX Runtime needs no such
        help, and the extra tokens would only cost it time."""
        from paddle_ft.runtime import share_cores_with_other_engines

        if engine not in self.engines:
            self.engines[engine] = self.openers.pop(engine)()
        if engine != AUTO_ORT and len(self.route.engines) > 1:
            share_cores_with_other_engines()  # Paddle's threads would spin on into ONNX Runtime's next call
        width = input_ids.shape[1]
        target = min(-(-width // WIDTH_STEP) * WIDTH_STEP, max(width, self.max_length))
        if target > width and engine != AUTO_ORT:
            extra = ((0, 0), (0, target - width))
            input_ids = np.pad(input_ids, extra, constant_values=self.pad_token_id)
            token_type_ids = np.pad(token_type_ids, extra)
        return self.engines[engine](np.ascontiguousarray(input_ids, dtype=np.int64),
                                    np.ascontiguousarray(token_type_ids, dtype=np.int64))
