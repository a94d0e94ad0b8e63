"""tools/e5_bench.py's bookkeeping, without training: seeds run once each and kept, figures as means, ranges and
medians (issue 66: one seed a side and the fastest turn had leaned the headline our way)."""
from types import SimpleNamespace

import e5_bench


def run(test: float, dev: float = 0.88, samples: float = 20.0, wall: float = 2400.0) -> dict:
    return {"test_accuracy": test, "dev_accuracy": dev, "samples_per_s": samples, "wall_seconds": wall,
            "peak_rss_mb": 3000}


class FakeRuns:
    """Runs' two training calls, answering a run per (engine, seed) and recording the order they came in."""

    threads = 2

    def __init__(self, answers: dict):
        self.answers, self.called = answers, []

    def paddle_ft(self, name, config, overrides, log_every=None):
        self.called.append(("paddle_ft", name, tuple(overrides)))
        return self.answers["paddle_ft", name]

    def peer(self, name, python, settings):
        self.called.append(("hf_trainer", name, (settings["seed"], settings["bf16"])))
        return self.answers["hf_trainer", name]


def test_each_seed_runs_once_per_engine_in_turns_and_a_kept_run_is_not_run_again():
    answers = {(engine, f"accuracy-seed-{seed}"): run(test) for engine, seed, test in [
        ("paddle_ft", 42, 0.884), ("paddle_ft", 43, 0.874), ("paddle_ft", 44, 0.879),
        ("hf_trainer", 42, 0.876), ("hf_trainer", 43, 0.881), ("hf_trainer", 44, 0.870)]}
    runs, saves = FakeRuns(answers), []
    args = SimpleNamespace(seeds=3, precision="bfloat16", config="c.yaml", peers_python="py")
    config = SimpleNamespace(seed=42, train=SimpleNamespace(optimizer=SimpleNamespace(
        learning_rate=7e-5, warmup=0.1, weight_decay=0.01, max_grad_norm=1.0), epochs=3, batch_size=32),
        model=SimpleNamespace(backbone="e5", dropout=0.1))
    features = {"train": "t", "dev": "d", "test": "s", "num_labels": 2}
    results = {"accuracy_runs": {"paddle_ft": {"42": run(0.884)}, "hf_trainer": {}}}  # an earlier bench's run

    summary = e5_bench.accuracy(runs, args, config, features, results, lambda: saves.append(len(runs.called)))

    assert runs.called == [("hf_trainer", "accuracy-seed-42", (42, True)),
                           ("paddle_ft", "accuracy-seed-43", ("seed=43", "train.amp.enabled=true",
                                                              "train.amp.dtype=bfloat16")),
                           ("hf_trainer", "accuracy-seed-43", (43, True)),
                           ("paddle_ft", "accuracy-seed-44", ("seed=44", "train.amp.enabled=true",
                                                              "train.amp.dtype=bfloat16")),
                           ("hf_trainer", "accuracy-seed-44", (44, True))]
    assert saves == [1, 2, 3, 4, 5]  # kept as each run ends
    ours = summary["paddle_ft"]
    assert ours["seeds"] == [42, 43, 44] and ours["test_accuracy_range"] == [0.874, 0.884]
    assert abs(ours["test_accuracy"] - 0.879) < 1e-12 and ours["samples_per_s"] == 20.0
    bars = e5_bench.bars({"accuracy": summary})
    assert bars["accuracy_points_behind_hf"] == {"value": round(100 * (0.8756666666666667 - 0.879), 2), "met": True}


def test_the_speed_turn_that_counts_is_the_median_not_the_fastest():
    turns = [{"samples_per_s": s, "real_tokens_per_s": t} for s, t in [(26.4, 1045), (24.0, 980), (25.1, 1001)]]
    chosen = e5_bench.median_turn(turns)
    assert chosen["real_tokens_per_s"] == 1001 and chosen["all_runs_real_tokens_per_s"] == [1045, 980, 1001]
    assert e5_bench.median_turn(turns[:2])["real_tokens_per_s"] == 980  # of two, the slower


def test_the_table_says_the_precision_the_peers_mkl_and_every_seed():
    summary = {"paddle_ft": e5_bench.engine_over_seeds({42: run(0.884), 43: run(0.874)}),
               "hf_trainer": e5_bench.engine_over_seeds({42: run(0.876), 43: run(0.881)})}
    results = {"config": "c.yaml", "precision": "float32", "peer_mkl": "paddle_ft's MKL code path, by LD_PRELOAD",
               "machine": {"cpu": "AMD EPYC", "kind": "AVX-512+BF16", "cores": 2, "threads": 2, "flags": ["avx2"]},
               "accuracy": summary}
    results["bars"] = e5_bench.bars(results)
    table = e5_bench.markdown(results)
    assert "(c.yaml, float32)" in table and "AMD EPYC (AVX-512+BF16)" in table
    assert "The HF side's MKL: paddle_ft's MKL code path, by LD_PRELOAD" in table
    assert "| paddle_ft | 0.8800 (0.8800-0.8800) | 0.8790 (0.8740-0.8840) | 0.8840, 0.8740 |" in table
    assert "- accuracy_points_behind_hf: -0.05 (bar 0.5): met" in table
