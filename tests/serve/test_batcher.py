"""The dynamic batcher: a lone request runs at once, batches form only while the predictor is busy, and a
failing batch fails only the request that causes it. No server: the batcher is driven directly."""
import asyncio
import threading
import time

from paddle_ft.serve.batcher import DynamicBatcher


def test_a_lone_request_runs_at_once():
    def delay(max_wait_ms: float) -> float:
        """Seconds from submitting a lone request to its batch starting."""
        started = []

        def run_batch(texts):
            started.append(time.perf_counter())
            return texts

        async def scenario():
            batcher = DynamicBatcher(run_batch, max_batch_size=32, max_wait_ms=max_wait_ms, max_queue_texts=100)
            batcher.start()
            sent = time.perf_counter()
            assert await batcher.submit(["a"]) == ["a"]
            await batcher.stop()
            return sent

        sent = asyncio.run(scenario())
        return started[0] - sent

    assert delay(0) < 0.1 and delay(300) >= 0.3  # the default never waits for company; a set wait always does


def test_requests_that_arrive_while_the_predictor_is_busy_form_the_next_batch():
    busy, calls = threading.Event(), []

    def run_batch(texts):
        calls.append(list(texts))
        if len(calls) == 1:
            busy.wait(5)  # the first batch runs until the others are queued
        return texts

    async def scenario():
        batcher = DynamicBatcher(run_batch, max_batch_size=4, max_wait_ms=0, max_queue_texts=100)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(["first"]))
        while not calls:
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(batcher.submit([f"t{i}"])) for i in range(6)]
        await asyncio.sleep(0.05)  # all six queued behind the running batch
        busy.set()
        results = await asyncio.gather(first, *rest)
        await batcher.stop()
        return results

    results = asyncio.run(scenario())
    assert results == [["first"], *[[f"t{i}"] for i in range(6)]]
    assert calls == [["first"], ["t0", "t1", "t2", "t3"], ["t4", "t5"]]  # as many as queued, up to the maximum


def test_with_a_wait_a_batch_gathers_what_arrives_within_it():
    calls = []

    async def scenario():
        batcher = DynamicBatcher(lambda texts: calls.append(list(texts)) or texts, max_batch_size=16, max_wait_ms=200,
                                 max_queue_texts=100)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(["a"]))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(batcher.submit(["b"]))
        await asyncio.gather(first, second)
        await batcher.stop()

    asyncio.run(scenario())
    assert calls == [["a", "b"]]


def test_a_failing_batch_is_retried_per_request_so_only_the_guilty_one_fails():
    calls = []

    def run_batch(texts):
        calls.append(list(texts))
        if "poison" in texts:
            raise ValueError("the model cannot take this")
        return [t.upper() for t in texts]

    async def scenario():
        batcher = DynamicBatcher(run_batch, max_batch_size=16, max_wait_ms=50, max_queue_texts=100)
        batcher.start()
        results = await asyncio.gather(batcher.submit(["a", "b"]), batcher.submit(["poison"]), batcher.submit(["c"]),
                                       return_exceptions=True)
        await batcher.stop()
        return results

    first, guilty, last = asyncio.run(scenario())
    assert first == ["A", "B"] and last == ["C"] and isinstance(guilty, ValueError)
    assert calls[0] == ["a", "b", "poison", "c"] and len(calls) == 4  # one batch, then one call per request
