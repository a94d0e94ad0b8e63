"""Dynamic batching by token budget: requests that arrive together are classified in one predictor call, and
no request, however large, holds the predictor from the others.

The predictor runs on one worker thread (a Paddle predictor is not thread-safe), so the event loop keeps
accepting requests meanwhile, and the next batch is formed only when the predictor is free, from what queued up
while the last batch ran (the adaptive rule: a lone request runs at once, batches form only under load). With
`max_wait_ms` > 0 a batch also waits up to that long after its first request for more to arrive.

A batch holds at most `max_batch_size` texts and `max_batch_tokens` tokens (a text's cost, `cost(item)`, is the
tokens the model will read of it). The budget is shared between the requests waiting, round robin: each gets an
equal share of every batch, and no single request more than `max_request_share` tokens of one, so a request larger
than that goes in chunks over several batches, interleaved with the requests that arrive meanwhile. Many small
requests still fill a batch (each is within its share), while a large one never makes a batch long: a one-text
request waits behind at most one short chunk, not behind all of a large request. A text whose cost alone exceeds
its share runs first in a batch, or alone.

A batch that fails fails only the requests in it: each request's part is run again alone, so that only a request
that fails on its own gets the error (its other chunks are dropped).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable


class QueueFull(Exception):
    """More texts are waiting than the server takes; the client should retry later."""


@dataclass(eq=False)
class _Request:
    items: list
    costs: list[int]
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)
    taken: int = 0
    """Items already given to a batch."""
    results: list = field(default_factory=list)
    finished: int = 0
    """Items whose results are in."""

    def __post_init__(self):
        self.results = [None] * len(self.items)


@dataclass(frozen=True)
class _Part:
    request: _Request
    start: int
    end: int


class DynamicBatcher:
    def __init__(self, run_batch: Callable[[list], list], max_batch_size: int, max_wait_ms: float,
                 max_queue_texts: int, on_batch: Callable[[int], None] = lambda size: None,
                 max_batch_tokens: int | None = None, cost: Callable[[object], int] = lambda item: 1,
                 max_request_share: int | None = None):
        self.run_batch, self.max_batch_size = run_batch, max_batch_size
        self.max_wait, self.max_queue_texts = max_wait_ms / 1000, max_queue_texts
        self.max_batch_tokens, self.cost, self.max_request_share = max_batch_tokens, cost, max_request_share
        self.on_batch = on_batch
        self.queued_texts = 0  # waiting, not yet in a running batch
        self._arrivals: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._active: deque[_Request] = deque()  # requests with items not yet batched, in turn order
        self._stopping = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="predictor")
        self._worker: asyncio.Task | None = None

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def stop(self) -> None:
        """Finish what is queued, then stop the worker."""
        if self._worker is not None:
            await self._arrivals.put(None)
            await self._worker
        self._executor.shutdown(wait=True)

    async def submit(self, items: list) -> list:
        """Results for `items`, in order, once all of them have run."""
        if self.queued_texts + len(items) > self.max_queue_texts:
            raise QueueFull(f"{self.queued_texts} texts are waiting (limit {self.max_queue_texts})")
        request = _Request(list(items), [max(1, self.cost(item)) for item in items],
                           asyncio.get_running_loop().create_future())
        self.queued_texts += len(items)
        await self._arrivals.put(request)
        return await request.future

    # ------------------------------------------------------------------ forming batches

    async def _work(self) -> None:
        while True:
            if not await self._gather():
                return
            parts = self._next_batch()
            if parts:
                await self._run(parts)

    async def _gather(self) -> bool:
        """Move arrivals into the active requests: wait for one when there is none, then take what has queued (for
        up to max_wait after the first request of the batch). False once stopping with nothing left."""
        if not self._active:
            if self._stopping:
                return False
            self._admit(await self._arrivals.get())
        deadline = (self._active[0].enqueued + self.max_wait) if self._active else time.perf_counter()
        while True:
            timeout = deadline - time.perf_counter()
            try:
                arrival = self._arrivals.get_nowait() if timeout <= 0 or self._stopping else \
                    await asyncio.wait_for(self._arrivals.get(), timeout)
            except (asyncio.TimeoutError, asyncio.QueueEmpty):
                break
            self._admit(arrival)
            if self._texts_waiting() >= self.max_batch_size:
                break
        return bool(self._active) or not self._stopping

    def _admit(self, arrival: _Request | None) -> None:
        if arrival is None:
            self._stopping = True  # run what is queued, then stop
        elif not arrival.future.done():
            self._active.append(arrival)
        else:  # the client went away before its turn
            self.queued_texts -= len(arrival.items)

    def _texts_waiting(self) -> int:
        return sum(len(r.items) - r.taken for r in self._active)

    def _next_batch(self) -> list[_Part]:
        """Round robin over the waiting requests: each gets one turn, an equal share of what is left of the budget
        (at least one text, at most `max_request_share` tokens), then goes to the back if it has more."""
        parts: list[_Part] = []
        texts, tokens = 0, 0
        budget = self.max_batch_tokens
        served = set()  # one turn per request per batch: its share is all it gets of this one
        while self._active and texts < self.max_batch_size and (budget is None or tokens < budget):
            if id(self._active[0]) in served:
                break
            request = self._active.popleft()
            served.add(id(request))
            if request.future.done():  # the client went away: its items are not run
                self.queued_texts -= len(request.items) - request.taken
                continue
            share_texts = max(1, (self.max_batch_size - texts) // (len(self._active) + 1))
            share_tokens = None if budget is None else max(1, (budget - tokens) // (len(self._active) + 1))
            if self.max_request_share is not None:  # no one request holds a batch longer than this much work
                share_tokens = min(share_tokens or self.max_request_share, self.max_request_share)
            start, end, spent = request.taken, request.taken, 0
            while end < len(request.items) and end - start < share_texts:
                cost = request.costs[end]
                if share_tokens is not None and spent + cost > share_tokens:
                    if end > start:
                        break  # this request has had its share of this batch
                    if parts and tokens + cost > budget:
                        break  # its next text does not fit what is left: it heads a later batch
                    # else its first text runs though over its share (over the whole budget: in a batch alone)
                spent += cost
                end += 1
            if end > start:
                parts.append(_Part(request, start, end))
                request.taken, texts, tokens = end, texts + end - start, tokens + spent
            if request.taken < len(request.items):
                self._active.append(request)
            if end == start:  # nothing more fits this batch
                break
        self.queued_texts -= texts
        return parts

    # ------------------------------------------------------------------ running them

    async def _run(self, parts: list[_Part]) -> None:
        items = [item for part in parts for item in part.request.items[part.start:part.end]]
        self.on_batch(len(items))
        try:
            results = await self._predict(items)
        except Exception as exc:  # the predictor failed on this batch: find the request(s) that cause it
            if len(parts) == 1:
                self._fail(parts[0].request, exc)
                return
            for part in parts:
                try:
                    self._deliver(part, await self._predict(part.request.items[part.start:part.end]))
                except Exception as alone:
                    self._fail(part.request, alone)
            return
        start = 0
        for part in parts:
            self._deliver(part, results[start:start + part.end - part.start])
            start += part.end - part.start

    def _deliver(self, part: _Part, results: list) -> None:
        request = part.request
        request.results[part.start:part.end] = results
        request.finished += part.end - part.start
        if request.finished == len(request.items) and not request.future.done():
            request.future.set_result(request.results)

    def _fail(self, request: _Request, exception: Exception) -> None:
        if request in self._active:  # its other chunks are not run
            self._active.remove(request)
            self.queued_texts -= len(request.items) - request.taken
        if not request.future.done():
            request.future.set_exception(exception)

    async def _predict(self, items: list) -> list:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.run_batch, items)
