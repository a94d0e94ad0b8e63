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


def test_a_large_request_goes_in_chunks_that_interleave_with_the_small_ones():
    """Budget 50 tokens a batch; a request of 20 texts of 10 tokens each, and one-text requests that arrive while
    its first chunk runs: every batch stays within the budget, the small ones are answered in the next batch, and
    the large one gets its results in order."""
    first_running, release, calls, finished = threading.Event(), threading.Event(), [], []

    def run_batch(items):
        calls.append(list(items))
        if len(calls) == 1:
            first_running.set()
            release.wait(5)
        return [item.upper() for item in items]

    async def scenario():
        batcher = DynamicBatcher(run_batch, max_batch_size=32, max_wait_ms=0, max_queue_texts=100,
                                 max_batch_tokens=50, cost=lambda item: 10 if item.startswith("big") else 1)
        batcher.start()

        async def send(items, name):
            result = await batcher.submit(items)
            finished.append(name)
            return result

        large = asyncio.ensure_future(send([f"big{i}" for i in range(20)], "large"))
        while not first_running.is_set():
            await asyncio.sleep(0.001)
        small = [asyncio.ensure_future(send([f"s{i}"], f"s{i}")) for i in range(3)]
        await asyncio.sleep(0.05)
        release.set()
        results = await asyncio.gather(large, *small)
        await batcher.stop()
        return results

    large, *small = asyncio.run(scenario())
    assert large == [f"BIG{i}" for i in range(20)] and small == [["S0"], ["S1"], ["S2"]]
    cost = [sum(10 if item.startswith("big") else 1 for item in call) for call in calls]
    assert max(cost) <= 50 and calls[0] == [f"big{i}" for i in range(5)]
    assert {"s0", "s1", "s2"} <= set(calls[1])  # the next batch after the first: the small ones are in it
    assert finished[-1] == "large" and len(calls) == 1 + 4  # 20 big texts, at most 4 a batch with company, then 5


def test_a_text_over_the_whole_budget_runs_in_a_batch_of_its_own():
    calls = []

    async def scenario():
        batcher = DynamicBatcher(lambda items: calls.append(list(items)) or items, max_batch_size=8, max_wait_ms=50,
                                 max_queue_texts=100, max_batch_tokens=10, cost=len)
        batcher.start()
        results = await asyncio.gather(batcher.submit(["x" * 30]), batcher.submit(["ab", "cd"]))
        await batcher.stop()
        return results

    assert asyncio.run(scenario()) == [["x" * 30], ["ab", "cd"]]
    assert calls == [["x" * 30], ["ab", "cd"]]


def test_no_request_gets_more_than_its_share_of_a_batch_even_alone():
    """64 texts of 128 tokens, a share of 256: two texts a predictor call, so a request arriving meanwhile waits
    behind at most two texts' work; small requests still fill a batch together."""
    calls = []

    async def scenario():
        batcher = DynamicBatcher(lambda items: calls.append(list(items)) or items, max_batch_size=32, max_wait_ms=20,
                                 max_queue_texts=1000, max_batch_tokens=4096, cost=len, max_request_share=256)
        batcher.start()
        large = await batcher.submit(["x" * 128] * 64)
        small = await asyncio.gather(*(batcher.submit([f"s{i}"]) for i in range(20)))
        await batcher.stop()
        return large, small

    large, small = asyncio.run(scenario())
    assert large == ["x" * 128] * 64 and small == [[f"s{i}"] for i in range(20)]
    assert [len(call) for call in calls[:32]] == [2] * 32 and calls[32:] == [[f"s{i}" for i in range(20)]]
