"""Dynamic batching: requests that arrive together are classified in one predictor call.

The predictor runs on one worker thread (a Paddle predictor is not thread-safe), so the event loop keeps
accepting requests meanwhile, and the next batch is formed only when the predictor is free: it takes what
queued up while the last batch ran, up to `max_batch_size` texts. So a lone request runs at once, and batches
form only under load, as large as the load makes them (the adaptive rule). With `max_wait_ms` > 0 a batch
also waits up to that long after its first request for more to arrive: larger batches at low load, for the
price of that latency on every lone request. A batch that fails fails
only the requests in it: it is run again one request at a time, so that only a request that fails on
its own gets the error.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable


class QueueFull(Exception):
    """More texts are waiting than the server takes; the client should retry later."""


@dataclass
class _Pending:
    texts: list[str]
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    def __init__(self, run_batch: Callable[[list[str]], list], max_batch_size: int, max_wait_ms: float,
                 max_queue_texts: int, on_batch: Callable[[int], None] = lambda size: None):
        self.run_batch, self.max_batch_size = run_batch, max_batch_size
        self.max_wait, self.max_queue_texts = max_wait_ms / 1000, max_queue_texts
        self.on_batch = on_batch
        self.queued_texts = 0  # waiting, not yet in a running batch
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._carry: _Pending | None = None  # a request that did not fit in the last batch
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="predictor")
        self._worker: asyncio.Task | None = None

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def stop(self) -> None:
        """Finish what is queued, then stop the worker."""
        if self._worker is not None:
            await self._queue.put(None)
            await self._worker
        self._executor.shutdown(wait=True)

    async def submit(self, texts: list[str]) -> list:
        """Results for `texts`, in order, once their batch has run."""
        if self.queued_texts + len(texts) > self.max_queue_texts:
            raise QueueFull(f"{self.queued_texts} texts are waiting (limit {self.max_queue_texts})")
        pending = _Pending(texts, asyncio.get_running_loop().create_future())
        self.queued_texts += len(texts)
        await self._queue.put(pending)
        return await pending.future

    async def _work(self) -> None:
        while True:
            batch = await self._next_batch()
            if not batch:
                return
            await self._run(batch)

    async def _next_batch(self) -> list[_Pending]:
        first = self._carry or await self._queue.get()
        self._carry = None
        if first is None:
            return []
        batch, size = [first], len(first.texts)
        deadline = first.enqueued + self.max_wait
        while size < self.max_batch_size:
            timeout = deadline - time.perf_counter()
            if timeout <= 0 and self._queue.empty():
                break
            try:
                nxt = self._queue.get_nowait() if timeout <= 0 else await asyncio.wait_for(self._queue.get(), timeout)
            except (asyncio.TimeoutError, asyncio.QueueEmpty):
                break
            if nxt is None:  # stop requested: run this batch, then stop
                self._queue.put_nowait(None)
                break
            if size + len(nxt.texts) > self.max_batch_size:
                self._carry = nxt  # heads the next batch
                break
            batch.append(nxt)
            size += len(nxt.texts)
        return batch

    async def _run(self, batch: list[_Pending]) -> None:
        texts = [text for pending in batch for text in pending.texts]
        self.queued_texts -= len(texts)
        self.on_batch(len(texts))
        try:
            results = await self._predict(texts)
        except Exception as exc:  # the predictor failed on this batch: find the request(s) that cause it
            if len(batch) == 1:
                _settle(batch[0], exception=exc)
                return
            for pending in batch:
                try:
                    _settle(pending, await self._predict(pending.texts))
                except Exception as alone:
                    _settle(pending, exception=alone)
            return
        start = 0
        for pending in batch:
            _settle(pending, results[start:start + len(pending.texts)])
            start += len(pending.texts)

    async def _predict(self, texts: list[str]) -> list:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.run_batch, texts)


def _settle(pending: _Pending, results: list | None = None, exception: Exception | None = None) -> None:
    if pending.future.done():  # the client went away
        return
    if exception is not None:
        pending.future.set_exception(exception)
    else:
        pending.future.set_result(results)
