"""`backend: auto`: the crossover fitted to measured times, and the Predictor sending each call where it belongs."""
import numpy as np
import pytest
from conftest import export_tiny_model, synthetic_rows

from paddle_ft.inference import routing
from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor, stack_probabilities
from paddle_ft.inference.routing import CallCost, Route, fit_crossover, measure_route, padded_call, single_route


def times(*pairs):
    return [{"onnxruntime": ort, "paddle": paddle} for ort, paddle in pairs]


def test_the_crossover_is_one_switch_where_the_engines_cross():
    assert fit_crossover(times((1, 3), (2, 3), (4, 3), (8, 3))) == ["onnxruntime"] * 2 + ["paddle"] * 2
    assert fit_crossover(times((1, 3), (2, 3))) == ["onnxruntime"] * 2
    assert fit_crossover(times((3, 1), (4, 2), (9, 4))) == ["paddle"] * 3


def test_one_noisy_measurement_does_not_send_its_size_to_the_slower_engine():
    # the third size's ONNX Runtime time was hit by a neighbour's burst (it is 1.01x paddle's there): keeping
    # ONNX Runtime throughout costs 1% at that size, where a switch and back would cost far more elsewhere
    assert fit_crossover(times((1, 4), (2, 5), (10.1, 10), (8, 20))) == ["onnxruntime"] * 4


class FakeClock:
    """perf_counter for engines whose cost is given, not measured: the route's choice is then exact."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def fake_engines(clock: FakeClock, calls: list):
    def engine(name, fixed, per_token):
        def run(ids, types):
            calls.append((name, ids.shape))
            clock.now += fixed + per_token * ids.size
            return np.zeros((ids.shape[0], 2), dtype=np.float32)
        return run
    # fixed cost per call against cost per token: the shape of ONNX Runtime against Paddle Inference's oneDNN
    return {"onnxruntime": engine("onnxruntime", 0.0001, 4e-6), "paddle": engine("paddle", 0.004, 1e-6)}


def test_measure_route_times_each_size_and_stops_before_a_slow_one(monkeypatch):
    clock, calls = FakeClock(), []
    monkeypatch.setattr(routing, "time", clock)
    sizes = ((1, 32), (4, 64), (16, 128), (64, 128))
    route = measure_route(fake_engines(clock, calls), sizes, token_id=2, pad_token_id=0)
    # ONNX Runtime's 0.1 ms + 4 us/token beats 4 ms + 1 us/token below 1,300 tokens: 16 x 128 is 2,048
    assert route.points == ((1, "onnxruntime"), (4, "onnxruntime"), (16, "paddle"), (64, "paddle"))
    assert route.describe() == "onnxruntime below batch 16, paddle from 16"
    assert route.engine_for(1) == "onnxruntime" and route.engine_for(128) == "paddle"
    assert route.engine_for(7) == "onnxruntime" and route.engine_for(9) == "paddle"  # nearest on a log scale
    assert route.seconds[1] == {"onnxruntime": pytest.approx(0.0001 + 4e-6 * 32), "paddle": pytest.approx(0.004032)}
    # each size: one unmeasured call per engine, then in each of 3 passes over the sizes rounds of BURST (2) calls per
    # engine taking turns until the pass's 40 ms are spent: 5 rounds at 1 x 32 (8.5 ms a round), one at 64 x 128 (90 ms)
    calls_of = {size: [name for name, shape in calls if shape == size] for size in ((1, 32), (64, 128))}
    assert calls_of[1, 32] == ["onnxruntime", "paddle"] + ["onnxruntime", "onnxruntime", "paddle", "paddle"] * 15
    assert calls_of[64, 128] == ["onnxruntime", "paddle"] + ["onnxruntime", "onnxruntime", "paddle", "paddle"] * 3
    # the passes: every size once before any size again
    order = [shape for _, shape in calls]
    assert order.index((64, 128)) < max(i for i, shape in enumerate(order) if shape == (1, 32))

    clock, calls = FakeClock(), []
    monkeypatch.setattr(routing, "time", clock)
    # paddle's 1 x 32 takes 4.03 ms: 4 x 64 (8 times the tokens) is predicted at 32.3 ms and measured at 4.26 ms,
    # 16 x 128 (8 times more) predicted at 34 ms: over STOP_AFTER_S, it is measured once (one call per engine after
    # the unmeasured one, no passes), as is 64 x 128 (predicted from ONNX Runtime's 8.3 ms at 16 x 128: 33 ms)
    monkeypatch.setattr(routing, "STOP_AFTER_S", 0.033)
    monkeypatch.setattr(routing, "LONG_CALL_S", 0.035)
    route = measure_route(fake_engines(clock, calls), sizes, token_id=2, pad_token_id=0)
    assert route.points == ((1, "onnxruntime"), (4, "onnxruntime"), (16, "paddle"), (64, "paddle"))
    assert [name for name, shape in calls if shape == (16, 128)] == ["onnxruntime", "paddle"] * 2
    assert route.seconds[16] == {"onnxruntime": pytest.approx(0.0001 + 4e-6 * 2048),
                                 "paddle": pytest.approx(0.004 + 1e-6 * 2048)}
    # 4 x 64 still in passes: 3 of 4 rounds (10.8 ms a round, until 40 ms are spent) of 2 calls per engine
    assert len([shape for _, shape in calls if shape == (4, 64)]) == 2 + 3 * 4 * 2 * 2

    clock, calls = FakeClock(), []
    monkeypatch.setattr(routing, "time", clock)
    monkeypatch.setattr(routing, "LONG_CALL_S", 0.033)  # 16 x 128's predicted 34 ms: it and 64 x 128 not measured
    route = measure_route(fake_engines(clock, calls), sizes, token_id=2, pad_token_id=0)
    assert [batch for batch, _ in route.points] == [1, 4]
    assert not [shape for _, shape in calls if shape[0] > 4]
    assert route.engine_for(256) == "onnxruntime"  # beyond the measured sizes: the largest one's engine


def test_a_measured_call_is_padded_as_a_batch_of_mixed_lengths_is():
    assert padded_call(1, 5, token_id=7, pad_token_id=0).tolist() == [[7, 7, 7, 7, 7]]
    assert padded_call(4, 8, token_id=7, pad_token_id=0).tolist() == [
        [7, 7, 0, 0, 0, 0, 0, 0], [7, 7, 7, 7, 0, 0, 0, 0], [7, 7, 7, 7, 7, 7, 0, 0], [7] * 8]
    assert padded_call(3, 4, token_id=7, pad_token_id=0).tolist() == [[7, 7, 0, 0], [7, 7, 7, 0], [7] * 4]


def test_neither_a_lucky_call_nor_a_slow_spell_decides_a_size(monkeypatch):
    """Each engine counts the median of its best calls in three passes: ONNX Runtime's one lucky call (35 ms, in the
    first pass) does not beat Paddle Inference's steady 40 ms, nor does Paddle's slow second pass (80 ms) lose."""
    clock = FakeClock()
    monkeypatch.setattr(routing, "time", clock)
    durations = {  # per engine: the unmeasured first call, then two calls (the second counting) in each pass
        "onnxruntime": iter([0.05, 0.05, 0.035, 0.05, 0.045, 0.05, 0.045]),
        "paddle": iter([0.05, 0.05, 0.04, 0.08, 0.08, 0.05, 0.04])}

    def engine(name):
        def run(ids, types):
            clock.now += next(durations[name])
            return np.zeros((ids.shape[0], 2), dtype=np.float32)
        return run
    route = measure_route({name: engine(name) for name in durations}, ((8, 128),), token_id=2, pad_token_id=0)
    assert route.points == ((8, "paddle"),)
    assert route.seconds[8] == {"onnxruntime": pytest.approx(0.045), "paddle": pytest.approx(0.04)}


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return export_tiny_model(tmp_path_factory.mktemp("routing"))


def export_files(export):
    return [export / "model.json", export / "model.pdiparams", export / "model.onnx"]


def test_auto_is_the_default_measures_once_and_keeps_only_the_engines_it_uses(export, tmp_path, monkeypatch):
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    auto = Predictor(export, PredictOptions(cpu_threads=1))
    assert auto.backend == "auto" and auto.engine_description.startswith("auto: ")
    assert [batch for batch, _ in auto.route.points] == [1, 4, 8, 16, 32]  # measured at load
    assert list(auto.engines.engines) == list(auto.route.engines)  # an engine no size goes to is let go
    measured = auto.route
    # the next load of this export with these threads takes the kept route, and loads its engines only
    monkeypatch.setattr(routing, "measure_route", lambda *args: pytest.fail("measured again"))
    again = Predictor(export, PredictOptions(cpu_threads=1))
    assert again.route == measured and list(again.engines.engines) == list(measured.engines)
    # other threads, or the export's files written again: measured afresh
    assert routing.cache_file(export_files(export), 2) != routing.cache_file(export_files(export), 1)
    before = routing.cache_file(export_files(export), 1)
    (export / "model.onnx").touch()
    assert routing.cache_file(export_files(export), 1) != before
    # a kept route naming an engine this version does not have (another paddle_ft's): measured afresh too
    routing.keep(routing.cache_file(export_files(export), 1), Route(((1, "tensorflow"),), {}))
    monkeypatch.undo()
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    assert Predictor(export, PredictOptions(cpu_threads=1)).route.points[-1][0] == 32


def test_a_damaged_kept_route_is_measured_again_not_taken(tmp_path):
    path = tmp_path / "route.json"
    kept = Route(((1, "onnxruntime"), (16, "paddle")), {1: {"onnxruntime": 0.001}, 16: {}})
    routing.keep(path, kept)
    assert routing.read_cached(path) == kept
    for damaged in ('{"points": []}', '{"points": [{"batch": 1}]}', "[1, 2]", '{"points": 3}', "{", ""):
        path.write_text(damaged, encoding="utf-8")
        assert routing.read_cached(path) is None, damaged
    assert routing.read_cached(tmp_path / "missing.json") is None and routing.read_cached(None) is None


def test_auto_sends_each_call_to_its_engine_with_the_probabilities_of_each(export, tmp_path, monkeypatch):
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    routing.keep(routing.cache_file(export_files(export), 1), Route(((1, "onnxruntime"), (32, "paddle")), {}))
    auto = Predictor(export, PredictOptions(cpu_threads=1))
    assert list(auto.engines.engines) == ["onnxruntime", "paddle"]
    used = []
    def spied(name, run):
        return lambda ids, types: used.append((name, ids.shape[0])) or run(ids, types)
    auto.engines.engines = {name: spied(name, run) for name, run in auto.engines.engines.items()}
    texts = [text for text, _ in synthetic_rows(64, seed=3)]
    one_by_one, batched = auto.predict(texts[:4], batch_size=1), auto.predict(texts, batch_size=64)
    assert used[:4] == [("onnxruntime", 1)] * 4 and used[4:] == [("paddle", 64)]
    for options in ({"backend": "onnxruntime"}, {"backend": "paddle"}, {"enable_onednn": False}):
        alone = Predictor(export, PredictOptions(cpu_threads=1, **options))
        np.testing.assert_allclose(stack_probabilities(batched), stack_probabilities(alone.predict(texts)), atol=1e-5)
        np.testing.assert_allclose(stack_probabilities(one_by_one), stack_probabilities(alone.predict(texts[:4])),
                                   atol=1e-5)


def test_a_one_off_opens_an_engine_at_its_first_call_and_measures_nothing(export, tmp_path, monkeypatch):
    """A `predict` of a few texts loaded both engines of a kept route, each with its copy of the weights (2.3 GB peak
    at e5-small's full vocabulary, 1.2 GB with the one its calls use), or measured a route first (14 s)."""
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    routing.keep(routing.cache_file(export_files(export), 1), Route(((1, "onnxruntime"), (32, "paddle")), {}))
    lazy = Predictor(export, PredictOptions(cpu_threads=1, one_off=True))
    assert lazy.engines.engines == {}
    texts = [text for text, _ in synthetic_rows(3, seed=5)]
    answers = lazy.predict(texts, batch_size=1)
    assert list(lazy.engines.engines) == ["onnxruntime"]
    np.testing.assert_allclose(stack_probabilities(answers), stack_probabilities(
        Predictor(export, PredictOptions(cpu_threads=1)).predict(texts, batch_size=1)), atol=1e-6)
    lazy.predict(texts * 11, batch_size=32)
    assert list(lazy.engines.engines) == ["onnxruntime", "paddle"]
    # with no route kept, none is measured (nor kept): ONNX Runtime runs every call
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "other-routes"))
    monkeypatch.setattr(routing, "measure_route", lambda *args: pytest.fail("measured"))
    unmeasured = Predictor(export, PredictOptions(cpu_threads=1, one_off=True))
    unmeasured.predict(texts * 11, batch_size=32)
    assert list(unmeasured.engines.engines) == ["onnxruntime"] and not (tmp_path / "other-routes").exists()


def test_auto_shortens_the_openmp_spin_of_the_threads_that_call_paddle_inference(export, tmp_path, monkeypatch):
    """Intel OpenMP keeps Paddle's threads spinning 200 ms after a call, which slowed ONNX Runtime's next calls in
    the same process 2-4x: a thread that runs a Paddle engine of an auto route sets it to SHARED_SPIN_MS."""
    import threading

    from paddle_ft import runtime

    library = runtime._intel_openmp()
    if library is None:
        pytest.skip("this paddle build has no Intel OpenMP (libiomp5) to set")
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    routing.keep(routing.cache_file(export_files(export), 1), Route(((1, "onnxruntime"), (32, "paddle")), {}))
    auto, ids = Predictor(export, PredictOptions(cpu_threads=1)), np.full((32, 16), 2, dtype=np.int64)
    seen = {}

    def call(batch: int, name: str):
        before = library.kmp_get_blocktime()
        auto.run(ids[:batch], np.zeros_like(ids[:batch]))
        seen[name] = (before, library.kmp_get_blocktime())

    for batch, name in ((1, "onnxruntime"), (32, "paddle")):  # each in a thread of its own: a fresh setting
        thread = threading.Thread(target=call, args=(batch, name))
        thread.start()
        thread.join()
    # a fresh thread starts from the process's default (Intel's 200 ms, unless something in this test process
    # changed it): the ONNX Runtime thread keeps it, the Paddle one ends at SHARED_SPIN_MS
    default = seen["onnxruntime"][0]
    assert default != runtime.SHARED_SPIN_MS
    assert seen == {"onnxruntime": (default, default), "paddle": (default, runtime.SHARED_SPIN_MS)}


def test_a_named_backend_runs_every_call_on_it(export):
    predictor = Predictor(export, PredictOptions(cpu_threads=1, backend="paddle"))
    assert list(predictor.engines.engines) == ["paddle"] and predictor.engine_description == "paddle"
    assert predictor.route.engine_for(64) == "paddle"


def test_an_onnx_runtime_session_left_alone_by_the_route_spins_again(export, tmp_path, monkeypatch):
    """Issue 48: measured with the other engines, ONNX Runtime's session stops its threads after each call (they
    would take the cores from the others); when the route keeps it alone, that session stayed, 0.91x as fast at
    batch 8 as a spinning one on e5-small's shape."""
    from paddle_ft.inference import backends

    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    monkeypatch.setattr(routing, "measure_route", lambda *args: Route(((1, "onnxruntime"), (64, "onnxruntime")), {}))
    made = []
    real = backends.onnxruntime_engine
    monkeypatch.setattr(backends, "onnxruntime_engine",
                        lambda *args, spinning=True: made.append(spinning) or real(*args, spinning=spinning))
    auto = Predictor(export, PredictOptions(cpu_threads=1))
    assert list(auto.engines.engines) == ["onnxruntime"] and made == [False, True]
    ids = np.full((2, 8), 2, dtype=np.int64)
    np.testing.assert_allclose(auto.run(ids, np.zeros_like(ids)),
                               Predictor(export, PredictOptions(cpu_threads=1, backend="onnxruntime")).run(
                                   ids, np.zeros_like(ids)), atol=1e-6)


def test_the_cost_of_a_call_is_fitted_to_the_route_and_splits_a_padded_batch_where_tokens_cost_the_most():
    widths = {1: 32, 4: 64, 8: 128, 32: 128}

    def route(fixed, per_token):
        seconds = {batch: {"onnxruntime": fixed + per_token * batch * width} for batch, width in widths.items()}
        return Route(tuple((batch, "onnxruntime") for batch in widths), seconds)

    cost = CallCost.fit(route(0.004, 1.7e-4), widths)  # e5-small's shape, about
    assert cost.fixed == pytest.approx(0.004) and cost.per_token == pytest.approx(1.7e-4)
    lengths = [128, 120, 118, 60, 58, 55, 20, 18, 12, 10]  # a batch of mixed lengths, longest first
    # one call: 10 x 128 tokens, 0.222 s; three of similar lengths: 3 x 128 + 3 x 60 + 4 x 20 tokens, 0.122 s (a
    # fourth call for the last two would save 16 tokens, 2.7 ms, and cost 4)
    assert cost.split(lengths, 32) == [(0, 3), (3, 6), (6, 10)]
    assert all(end - start <= 2 for start, end in cost.split(lengths, 2))  # never more than batch_size a call
    # a small model's fixed cost per call outweighs its padding: one call
    assert CallCost.fit(route(0.001, 1e-7), widths).split(lengths, 32) == [(0, 10)]
    # nothing to fit: a named backend's route, or one measured size
    assert CallCost.fit(Route(((1, "paddle"),), {}), widths) is None
    assert CallCost.fit(Route(((8, "paddle"),), {8: {"paddle": 0.1}}), widths) is None


def test_a_split_batch_gives_the_answers_of_one_call(export, tmp_path, monkeypatch):
    monkeypatch.setenv(routing.CACHE_VARIABLE, str(tmp_path / "routes"))
    auto = Predictor(export, PredictOptions(cpu_threads=1))
    texts = [text for text, _ in synthetic_rows(40, seed=4)]
    auto.engines.route = single_route("onnxruntime")  # nothing measured: calls of batch_size
    whole = auto.predict(texts, batch_size=64)
    calls = []
    measured = Route(((1, "onnxruntime"), (32, "onnxruntime")), {1: {"onnxruntime": 0.001}, 32: {"onnxruntime": 1.0}})
    auto.engines.route = measured  # tokens cost the most here: the batch is cut by length
    run = auto.engines.run
    auto.engines.run = lambda ids, types: calls.append(ids.shape) or run(ids, types)
    split = auto.predict(texts, batch_size=64)
    assert len(calls) > 1 and sum(shape[0] for shape in calls) == 40
    assert [p.label for p in split] == [p.label for p in whole]
    assert np.allclose([p.vector for p in split], [p.vector for p in whole], atol=1e-6)
