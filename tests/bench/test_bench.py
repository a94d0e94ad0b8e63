"""tools/bench.py: the summaries it computes, the report it writes, and one real (tiny) run of it."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench import report
from bench.inference import ENGINES, _wait_for_quiet_threads
from bench.limits import profile_groups
from bench.serving import PLAIN_ONNX
from bench.shape import step_windows, summarise_windows
from conftest import write_splits

from paddle_ft import runtime

ROOT = Path(__file__).resolve().parents[2]


def test_windows_drop_the_warm_up_and_total_the_rest():
    ends = [1.0 * i for i in range(1, 25)]  # 24 steps of 1 s: three windows of 8
    samples, real, padded = [32] * 24, [100] * 8 + [300] * 16, [400] * 24
    windows = step_windows(ends, 0.0, samples, real, padded)
    assert [w["seconds"] for w in windows] == [8.0, 8.0, 8.0]
    summary = summarise_windows(windows)
    assert summary["samples_per_s"] == 32 and summary["real_tokens_per_s"] == 300
    assert summary["padded_tokens_per_s"] == 400 and summary["padding_share"] == 0.25
    assert summary["measured_steps"] == 16
    with pytest.raises(ValueError):
        summarise_windows(windows[:1])


def test_the_profile_counts_the_kernels_forward_spans_and_each_span_once(tmp_path):
    """Two steps of 100 ms: a matmul with an operator nested in it, a fused kernel's forward (the span it leaves, as
    the profiler records no operator for it) with an operator nested in it, the fused clip in the optimizer's step,
    and 10 ms of nothing (Python)."""
    def span(cat, name, ms, duration_ms):
        return {"cat": cat, "name": f"{name}[{duration_ms} ms]", "ts": ms * 1000, "dur": duration_ms * 1000}
    events = []
    for start in (0, 100):
        events += [span("Optimization", "Optimization Step", start, 5),
                   span("Operator", "matmul", start + 5, 40), span("Operator", "full", start + 5, 3),
                   span("PythonOp", "paddle_ft_attention", start + 45, 30), span("Operator", "empty", start + 45, 30),
                   span("PythonOp", "paddle_ft_clip_by_global_norm", start + 75, 15)]
    events.append(span("Optimization", "Optimization Step", 200, 5))
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    profile = profile_groups(trace, skip_steps=0)
    assert profile["steps"] == 2 and profile["seconds"] == 0.2
    assert profile["shares"] == {"matmul": 0.4, "fused kernels (paddle_ft)": 0.3, "optimizer and clipping": 0.2,
                                 "outside Paddle's operators": 0.1}


def test_every_engine_of_the_training_table_trains_on_the_same_texts_warm_up_apart(tmp_path, vocab_file):
    """The texts every engine times are one sample of the train split, none of them among the warm-up texts; the
    peers' token ids are those of the same texts (a window of each engine's own epoch timed other texts: paddle_ft's
    averaged 50 real tokens a text, HF's 59)."""
    from bench.run import write_training_texts
    from paddle_ft.errors import UserError

    demo = write_splits(tmp_path / "data", (600, 10, 10))
    shutil.copy(vocab_file, demo / "vocab.txt")
    texts = write_training_texts(demo, tmp_path / "work", 320)
    train = (demo / "train.tsv").read_text(encoding="utf-8").splitlines()
    warmup = texts.warmup_tsv.read_text(encoding="utf-8").splitlines()
    measured = texts.measured_tsv.read_text(encoding="utf-8").splitlines()
    assert warmup[0] == measured[0] == train[0]  # the header
    assert len(warmup) == 1 + 256 and len(measured) == 1 + 320 and texts.train_split == 600
    assert not set(warmup[1:]) & set(measured[1:]) and set(warmup[1:] + measured[1:]) <= set(train[1:])
    assert write_training_texts(demo, tmp_path / "again", 320) == \
        dataclasses.replace(texts, **{f: tmp_path / "again" / getattr(texts, f).name for f in
                                      ("warmup_tsv", "measured_tsv", "warmup_features", "measured_features")})
    assert (tmp_path / "again" / "train_measured.tsv").read_text(encoding="utf-8") == "\n".join(measured) + "\n"
    features = [json.loads(line) for line in texts.measured_features.read_text(encoding="utf-8").splitlines()]
    first_text = measured[1].split("\t")[0]
    vocab = (demo / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(features) == 320 and "".join(vocab[i] for i in features[0]["input_ids"][1:-1]) == first_text
    with pytest.raises(UserError, match="has 600 texts; .* 256 to warm up and times 384 others: give fewer --windows"):
        write_training_texts(demo, tmp_path / "work", 384)


def test_each_engine_turn_waits_until_the_previous_engines_threads_stop_spinning():
    def spin(seconds):  # like an engine's worker thread after its last call
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    _wait_for_quiet_threads(slice_s=0.02)  # whatever an earlier test left running in this process
    started = time.perf_counter()
    _wait_for_quiet_threads(slice_s=0.02)
    assert time.perf_counter() - started < 0.25  # a quiet process: one slice, with room for a busy machine
    spinner = threading.Thread(target=spin, args=(0.3,))
    spinner.start()
    started = time.perf_counter()
    _wait_for_quiet_threads(slice_s=0.02, limit_s=2.0)
    waited = time.perf_counter() - started
    spinner.join()
    assert 0.25 <= waited < 1.0
    spinner = threading.Thread(target=spin, args=(0.6,))
    spinner.start()
    started = time.perf_counter()
    _wait_for_quiet_threads(slice_s=0.02, limit_s=0.1)  # never longer than the limit
    assert time.perf_counter() - started < 0.3
    spinner.join()


def _results() -> dict:
    train = {"paddle_ft": {"samples_per_s": 48.0, "real_tokens_per_s": 3000, "padded_tokens_per_s": 3100,
                           "padding_share": 0.03, "peak_rss_mb": 1300},
             "paddlenlp_trainer": {"samples_per_s": 8.0, "real_tokens_per_s": 500, "padded_tokens_per_s": 1000,
                                   "padding_share": 0.5, "peak_rss_mb": 1200},
             "hf_trainer": {"samples_per_s": None, "skipped": "no peer environment"},
             "hf_trainer_group_by_length": {"samples_per_s": None, "skipped": "no peer environment"}}
    infer = {name: {"batch_1": {"samples_per_s": 50.0}, "batch_8": {"samples_per_s": 80.0},
                    "batch_32": {"samples_per_s": 90.0 if name != "onnxruntime" else 60.0},
                    "batch_1_p50_ms": 20.0, "batch_1_p99_ms": 30.0, "max_abs_diff": 1e-7} for name in ENGINES}
    infer["onnxruntime_int8"] = {**infer["onnxruntime"], "batch_32": {"samples_per_s": 120.0, "label_agreement": 0.99}}
    models = {name: {"test_accuracy": accuracy, "batch_1_p50_ms": ms, "batch_32": {"samples_per_s": speed},
                     "model_dir": f"out/{name}/best"}
              for name, accuracy, ms, speed in (("teacher", 0.85, 2.0, 300.0), ("student", 0.84, 0.5, 1500.0))}
    serve = [{"batching": b, "concurrency": c, "requests_per_s": r, "p50_ms": 10.0, "p99_ms": 20.0, "requests": 400,
              "errors": 0} for b, c, r in (("adaptive (default)", 1, 95.0), ("off", 1, 100.0), (PLAIN_ONNX, 1, 50.0))]
    results = {"train": train, "infer": infer, "models": models, "serve": serve,
               "int8_check": {"method": "dynamic", "accuracy_fp32": 0.85, "accuracy_int8": 0.847, "agreement": 0.99,
                              "texts": 1736},
               "amp": {"device": "cpu", "note": "CPU: only fp32", "rows": [
                   {"precision": "fp32", "samples_per_s": 48.0, "epoch_minutes": 4.8, "peak_memory_mb": 1300,
                    "largest_batch": None, "final_accuracy": None}]},
               "tokenizer": {"paddle_ft": {"texts_per_s": 7000, "class": "FastBertTokenizer"}},
               "machine": {"cpu": "Test CPU", "cpu_flags": ["avx2", "avx512_vnni"], "usable_cores": 2, "threads": 2,
                           "paddle_version": "3.3.1",
                           "paddlenlp_version": "2.8.1"},
               "limits": {"gemm": {"paddle_fp32": {"gflops": 150.0, "shape": [4096, 256, 1024]},
                                   "onnxruntime_fp32": {"gflops": 140.0, "shape": [4096, 256, 256]},
                                   "onnxruntime_int8": {"gflops": 600.0, "shape": [4096, 256, 256]}}},
               "profile": {"shares": {"matmul": 0.7, "dropout": 0.2, "other": 0.1}, "steps": 8},
               "infer_mean_tokens": 60.0,
               "auto_route": {"fp32": {"points": [{"batch": 1, "engine": "onnxruntime"},
                                                  {"batch": 64, "engine": "paddle"}]}},
               "settings": {"shape": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024,
                                      "max_length": 128},
                            "batch_size": 32, "measured_texts": 1536, "warmup_steps": 8, "paddlenlp_trainer_steps": 32,
                            "quick": False}}
    results["ratios"] = report.ratios(results)
    return results


def test_report_ratios_table_and_chart(tmp_path):
    results = _results()
    assert results["ratios"]["train_vs_paddlenlp_trainer"] == 6.0
    assert results["ratios"]["train_vs_hf_trainer"] is None
    assert results["ratios"]["infer_batch_32_onednn_vs_onnxruntime"] == 1.5
    table = report.markdown(results)
    assert table.startswith("Machine: Test CPU, CPU kind AVX2-only (avx2, avx512_vnni), ")
    assert "| paddle_ft engine | 48.0 | 3,000 | 3,100 | 3.0% | 1,300 |  |  |" in table
    assert "| PaddleNLP Trainer (defaults) | 8.0 | 500 | 1,000 | 50.0% | 1,200 | 6.00x | 6.00x |" in table
    assert "| HF Trainer (defaults) | no peer environment |" in table
    assert "| onnxruntime | 50.0 | 80.0 | 60.0 | 20.00 | 30.00 | 1e-07 |" in table
    assert "at batch 32: 1.50x" in table
    # int8 against the fastest fp32 engine (90, Paddle Inference) first, not ONNX Runtime's 60 alone
    assert "Low precision against the fastest fp32 engine at batch 32 (paddle_inference), samples/s: " \
           "onnxruntime_int8 1.33x." in table
    assert results["ratios"]["infer_batch_32_auto_vs_fastest_fp32"] == 1.0  # 90 against the Paddle engines' 90
    assert "backend auto (the default) against the fastest fp32 engine: batch 1 1.00x, batch 8 1.00x, batch 32 " \
           "1.00x; its route, measured at load: batch 1 -> onnxruntime, batch 64 -> paddle." in table
    # with rounds, the ratio is the median of the rounds' ratios (0.83, 1.0, 1.8), not the ratio of the medians
    # (90 / 95): a slow spell hit auto's first round and the fastest engine's last
    results["infer"]["auto"]["batch_32"]["rounds"] = [50.0, 90.0, 90.0]
    results["infer"]["paddle_inference"]["batch_32"]["rounds"] = [60.0, 90.0, 50.0]
    results["infer"]["paddle_inference"]["batch_32"]["samples_per_s"] = 95.0
    assert report.ratios(results)["infer_batch_32_auto_vs_fastest_fp32"] == pytest.approx(1.0)
    assert report.ratios(results)["infer_batch_32_auto_vs_fastest_fp32_range"] == pytest.approx([50 / 60, 90 / 50])
    results["ratios"] = report.ratios(results)
    assert "batch 32 1.00x (0.83-1.80x)" in report.markdown(results)
    # 3,000 real tokens/s of 62.5 tokens a text: 3 x 2 x 4 layers x (4 x 256^2 + 2 x 256 x 1024 + 2 x 256 x 62.5)
    # = 19.64 MFLOP a token, 58.9 GFLOP/s, 39.3% of the faster fp32 matmul (150): shares with one decimal, not a
    # rounded 39% (issue 66: a 74.5% share was printed as 75%)
    assert results["ratios"]["train_useful_share_of_matmul"] == pytest.approx(3000 * 19_642_368 / 1e9 / 150)
    assert "| training: paddle_ft engine | 58.9 | 150 | 39.3% |" in table
    # int8 at batch 32: 120 texts/s x 60 tokens x 6.54 MFLOP, against the int8 matmul
    assert "| inference batch 32: onnxruntime_int8 | 47.1 | 600 | 7.8% |" in table
    assert "Where paddle_ft's training step goes (paddle.profiler, wall time of 8 steps after warm-up): " \
           "matmul 70.0%, dropout 20.0%, other 10.0%." in table
    assert "Machine: Test CPU, CPU kind AVX2-only (avx2, avx512_vnni)" in table
    assert "test accuracy 0.8470 against fp32's 0.8500 (-0.30 points), the same label on 99.0% of 1736 texts; " \
           "batch 32 2.00x ONNX Runtime fp32" in table
    assert "| student (out/student/best) | 0.8400 | 0.50 | 2,000.0 | 1,500.0 |" in table
    assert "The student keeps 98.8% of the teacher's test accuracy at 4.00x its batch-1 speed" in table
    assert "| adaptive (default) | 1 | 95.0 |" in table and "batching (adaptive) at 0.95x the requests/s" in table
    assert f"paddle_ft serve (adaptive) against {PLAIN_ONNX}, requests/s: 1 clients 1.90x (p99 20.0 against 20.0 ms)." \
        in table
    report.chart(results, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_tiny_bench_run_writes_every_documented_key(tmp_path, vocab_file):
    data_dir = write_splits(tmp_path / "data", (520, 60, 60))  # --quick: 256 texts to warm up on, 256 timed
    shutil.copy(vocab_file, data_dir / "vocab.txt")
    out = tmp_path / "bench"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "--quick", "--model-shape", "1,32,2,64",
                           "--data", str(data_dir), "--output", str(out), "--peers-python", str(tmp_path / "none"),
                           "--threads", "1", "--serve", "--teacher", str(out / "work" / "paddle_ft-fp32" / "best"),
                           "--student", str(out / "work" / "paddle_ft-fp32" / "best")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    bench = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    assert bench["train"]["paddle_ft"]["samples_per_s"] > 0
    assert bench["train"]["paddle_ft"]["measured_steps"] == 8  # one epoch of the 256 timed texts, every window counted
    assert bench["train"]["paddlenlp_trainer"]["samples_per_s"] > 0
    if runtime.cpu_supports_bf16():  # issue 66: paddle_ft's bf16 row beside its float32 one
        assert bench["train"]["paddle_ft_bf16"]["samples_per_s"] > 0, bench["train"]["paddle_ft_bf16"]
        assert bench["train"]["paddle_ft_bf16"]["measured_steps"] == 8
        assert bench["ratios"]["train_bf16_vs_fp32_per_token"] > 0
    else:
        assert "no bfloat16 arithmetic" in bench["train"]["paddle_ft_bf16"]["skipped"]
    for peer in ("hf_trainer", "hf_trainer_group_by_length"):
        assert bench["train"][peer]["samples_per_s"] is None and "make bench-peers" in bench["train"][peer]["skipped"]
    for engine in ENGINES:
        for size in (1, 8, 32):
            assert bench["infer"][engine][f"batch_{size}"]["samples_per_s"] > 0
        assert bench["infer"][engine]["max_abs_diff"] < 1e-4
    assert bench["infer"]["dygraph"]["max_abs_diff"] == 0.0
    assert bench["infer"]["onnxruntime_int8"]["batch_32"]["samples_per_s"] > 0
    assert bench["int8_check"]["texts"] == 60 and 0 <= bench["int8_check"]["accuracy_int8"] <= 1
    assert bench["models"]["student"]["test_accuracy"] == bench["models"]["teacher"]["test_accuracy"]  # same model
    assert {(r["batching"], r["concurrency"]) for r in bench["serve"]} == \
        {(b, c) for b in ("adaptive (default)", "wait 5 ms", "off", PLAIN_ONNX) for c in (1, 8)}  # --quick: 2 levels
    assert all(r["errors"] == 0 and r["requests"] > 0 for r in bench["serve"])
    assert {"cpu", "cores", "threads", "paddle_version", "cpu_flags"} <= bench["machine"].keys()
    assert bench["machine"]["threads"] == 1 and bench["settings"]["shape"]["hidden_size"] == 32
    assert bench["tokenizer"]["paddle_ft"]["class"] == "FastBertTokenizer"
    assert {"paddle_fp32", "onnxruntime_fp32", "onnxruntime_int8"} <= bench["limits"]["gemm"].keys()
    assert all(rate["gflops"] > 0 for rate in bench["limits"]["gemm"].values())
    assert bench["profile"]["steps"] > 0 and sum(bench["profile"]["shares"].values()) == pytest.approx(1, abs=1e-3)
    assert bench["profile"]["shares"]["matmul"] > 0.05
    assert bench["profile"]["shares"]["optimizer and clipping"] > 0  # the fused update's span, as Paddle's step's
    assert all(bench["ratios"][f"infer_batch_{n}_auto_vs_fastest_fp32"] > 0 for n in (1, 8, 32))
    assert 0 < bench["ratios"]["train_useful_share_of_matmul"] < 1
    assert (out / "bench.png").is_file() and "| paddle_ft engine |" in (out / "bench.md").read_text(encoding="utf-8")
    assert "| paddle_ft engine |" in done.stdout


class FakeJobs:
    """Runs nothing: batches up to `fits` succeed; a larger one fails with `failure` in its log."""

    def __init__(self, fits: int, failure: str):
        self.fits, self.failure, self.names = fits, failure, []

    def paddle(self, name, args):
        from bench.search import is_out_of_memory

        self.names.append((name, args["name"]))
        if args["overrides"]["train.batch_size"] <= self.fits:
            return {"samples_per_s": 1.0}
        return {"samples_per_s": None, "error": "exit 1; see log", "out_of_memory": is_out_of_memory(self.failure)}


def test_largest_batch_names_runs_by_precision_and_tells_oom_from_other_failures():
    from bench.run import largest_batch

    oom = FakeJobs(128, "ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.2GB")
    assert largest_batch(oom, {}, "fp16", {"train.amp.enabled": True}) == (128, None)
    other = FakeJobs(32, "error: /x/paddle_ft-batch-64 already holds a training run")
    assert largest_batch(other, {}, "bf16", {}) == (32, "exit 1; see log")  # not counted as out of memory
    names = [name for name, _ in oom.names + other.names]
    assert len(names) == len(set(names)) and all("fp16" in n or "bf16" in n for n in names)


@pytest.mark.slow  # trains, exports and starts a server
def test_the_full_size_smoke_trains_exports_predicts_and_serves(tmp_path, capsys):
    """tools/full_size_smoke.py's plumbing, at a tiny shape here (README has its figures at bert-base's)."""
    from bench.full_size import main

    assert main(["--output", str(tmp_path / "smoke"), "--shape", "2,32,2,64", "--vocab-size", "300",
                 "--steps", "6"]) == 0
    figures = json.loads((tmp_path / "smoke" / "full_size.json").read_text(encoding="utf-8"))
    assert figures["parity_paddle"] <= 1e-4 and figures["parity_onnx"] <= 1e-4
    assert figures["server_status"] == 200 and figures["server_exit"] == 0
    assert figures["seconds_per_step"] > 0 and figures["peak_rss_mib"] > 0 and figures["export_mib"] >= 0
    assert len((tmp_path / "smoke" / "data" / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 300


def test_the_matmul_limit_is_measured_at_the_bench_shapes_own_sizes():
    """Issue 48: at --model-shape 12,384,12,1536 the limit was still measured at 4 x 256's matmuls."""
    from bench.limits import GEMM_ROWS, gemm_shapes

    e5_small = {"num_layers": 12, "hidden_size": 384, "num_heads": 12, "intermediate_size": 1536}
    assert gemm_shapes(e5_small) == ((GEMM_ROWS, 384, 1536), (GEMM_ROWS, 1536, 384), (GEMM_ROWS, 384, 384),
                                     (1024, 1024, 1024))


def test_the_headline_is_like_for_like_and_bf16_rows_meet_their_own_kind():
    """Issue 66: on AMD the HF peer also runs with paddle_ft's MKL path (LD_PRELOAD of the same library) and the
    headline ratio is against that row; a bf16 peer is compared with paddle_ft's bf16 row, against the bf16 GEMM."""
    results = _results()
    row = {"padded_tokens_per_s": 1000, "padding_share": 0.02, "peak_rss_mb": 900}
    results["train"].update({
        "hf_trainer_group_by_length": {**row, "samples_per_s": 20.0, "real_tokens_per_s": 1200},
        "hf_trainer_group_by_length_same_mkl": {**row, "samples_per_s": 30.0, "real_tokens_per_s": 2000},
        "paddle_ft_bf16": {**row, "samples_per_s": 72.0, "real_tokens_per_s": 4500},
        "hf_trainer_group_by_length_bf16": {**row, "samples_per_s": 36.0, "real_tokens_per_s": 2500}})
    results["limits"]["gemm"]["paddle_ft_bf16"] = {"gflops": 400.0, "shape": [4096, 256, 1024]}
    ratios = report.ratios(results)
    assert ratios["train_vs_hf_trainer_group_by_length_per_token"] == 2.5  # 3,000 / 1,200: as a user runs HF
    assert ratios["train_like_for_like_per_token"] == 1.5  # 3,000 / 2,000: the same MKL path
    assert ratios["train_vs_hf_trainer_group_by_length_bf16_per_token"] == 1.8  # 4,500 / 2,500: bf16 against bf16
    assert ratios["train_bf16_vs_fp32_per_token"] == 1.5
    results["ratios"] = ratios
    table = report.markdown(results)
    assert "Like for like (per real token, against HF Trainer (group_by_length, paddle_ft's MKL path)): paddle_ft " \
           "1.50x." in table
    assert "| HF Trainer (group_by_length, bf16=True) | 36.0 | 2,500 | 1,000 | 2.0% | 900 | 2.00x | 1.80x |" in table
    # 4,500 real tokens/s x 19.64 MFLOP (62.5 tokens a text) = 88.4 GFLOP/s, 22.1% of the bf16 GEMM's 400
    assert "| training: paddle_ft engine, bf16 matmuls | 88.4 | 400 | 22.1% |" in table
    del results["train"]["hf_trainer_group_by_length_same_mkl"]  # another CPU: no such row, the grouped one leads
    assert report.ratios(results)["train_like_for_like_per_token"] == 2.5


def test_a_training_row_is_its_median_run_not_its_best():
    from bench.run import _median_run

    runs = [{"samples_per_s": s, "real_tokens_per_s": s * 60} for s in (30.0, 24.0, 27.0)]
    row = _median_run(runs)
    assert row["samples_per_s"] == 27.0 and [r["samples_per_s"] for r in row["runs"]] == [30.0, 24.0, 27.0]
    assert _median_run(runs[:2])["samples_per_s"] == 24.0  # of two, the slower: never the luckier
    assert _median_run([{"error": "exit 1"}, runs[0]])["samples_per_s"] == 30.0


PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not PEERS_PYTHON.is_file(), reason="the HF peer needs torch + transformers: make bench-peers")
def test_the_hf_peer_times_the_same_steps_as_paddle_ft_with_length_grouping_that_pads_little(tmp_path, vocab_file):
    """Issue 66: the peer script itself, at a tiny shape, as the bench runs it: each row's timed steps are
    paddle_ft's, length grouping pads < 5% of the tokens, and its bf16 and same-MKL rows run."""
    import os

    from bench.run import Jobs, same_mkl_environment, write_training_texts
    from bench.shape import SHAPE_VARIABLE, measured_texts, train_steps

    data_dir = write_splits(tmp_path / "data", (1100, 60, 60))
    shutil.copy(vocab_file, data_dir / "vocab.txt")
    texts = write_training_texts(data_dir, tmp_path / "work", measured_texts(3))  # 3 windows of 8 batches
    os.environ[SHAPE_VARIABLE] = "1,32,2,64"  # the children read it (the bench sets it for --model-shape)
    try:
        jobs = Jobs(tmp_path, threads=1)
        (tmp_path / "logs").mkdir()
        ours = jobs.paddle("paddle_ft", {"demo": str(data_dir), "workdir": str(tmp_path / "work"), "threads": 1,
                                         "steps": train_steps(3), "texts": {"warmup": str(texts.warmup_tsv),
                                                                            "measured": str(texts.measured_tsv)}})
        same_mkl, _ = same_mkl_environment()
        rows = {}
        for name, flags, env in (("grouped", ["--group-by-length"], runtime.environment_as_given()),
                                 ("plain", [], runtime.environment_as_given()),
                                 ("same_mkl", ["--group-by-length"], same_mkl),
                                 ("bf16", ["--group-by-length", "--bf16"], runtime.environment_as_given())):
            if env is None or (name == "bf16" and not runtime.cpu_supports_bf16()):
                continue
            rows[name] = jobs.run(name, [str(PEERS_PYTHON), str(ROOT / "tools" / "bench" / "hf_trainer.py"),
                                         str(texts.measured_features), str(texts.warmup_features),
                                         str(data_dir / "vocab.txt"), "1", *flags], env)
    finally:
        del os.environ[SHAPE_VARIABLE]
    assert ours["measured_steps"] == 24, ours
    for name, row in rows.items():
        assert row.get("error") is None, (name, row)
        assert row["measured_steps"] == ours["measured_steps"], name
    assert rows["grouped"]["padding_share"] < 0.05 < rows["plain"]["padding_share"]  # 3.0% against 41.9% here
    assert abs(rows["grouped"]["padding_share"] - ours["padding_share"]) < 0.005  # paddle_ft's grouping pads as much
    assert rows.get("bf16", {"bf16": True})["bf16"] is True


def test_a_training_ratio_is_the_median_of_each_rounds_ratio_with_its_range():
    """Issue 66: the engines take turns over three rounds; the ratio printed is the median of the rounds' own ratios
    with their range, not the ratio of the two median runs (on this AMD EPYC that was 1.32x where the rounds gave
    1.25x, 1.32x and 1.28x)."""
    results = _results()
    row = {"padded_tokens_per_s": 1000, "padding_share": 0.02, "peak_rss_mb": 900}

    def runs(*tokens):
        return [{"samples_per_s": t / 62.5, "real_tokens_per_s": t} for t in tokens]

    results["train"]["paddle_ft"]["runs"] = runs(1326, 1305, 1222)
    results["train"]["hf_trainer_group_by_length_same_mkl"] = {**row, "samples_per_s": 991 / 62.5,
                                                               "real_tokens_per_s": 991,
                                                               "runs": runs(1062, 991, 954)}
    ratios = report.ratios(results)
    assert ratios["train_like_for_like_per_token"] == pytest.approx(1222 / 954)  # 1.281, not 1305 / 991 = 1.317
    assert ratios["train_like_for_like_per_token_range"] == pytest.approx([1326 / 1062, 1305 / 991])
    assert ratios["train_vs_paddlenlp_trainer_range"] is None  # PaddleNLP's Trainer runs once
    results["ratios"] = ratios
    table = report.markdown(results)
    assert "paddle_ft 1.28x (1.25-1.32x)." in table
    assert "| HF Trainer (group_by_length, paddle_ft's MKL path) | 15.9 | 991 | 1,000 | 2.0% | 900 | 1.28x " \
           "(1.25-1.32x) | 1.28x (1.25-1.32x) |" in table
    assert "the median of the two engines' ratio in each of the 3 rounds" in table


def test_the_load_tests_rows_are_median_rounds_and_its_ratios_the_median_of_each_rounds():
    """Issue 66: the service against the plain ONNX Runtime server was one run (0.86-1.14x over seven); the bench
    now runs the load test three times, every server afresh, and prints the median and range of the rounds' ratios."""
    from bench.serving import _median_round

    def row(name, rps, p99):
        return {"batching": name, "concurrency": 1, "requests_per_s": rps, "p50_ms": 10.0, "p99_ms": p99,
                "requests": 400, "errors": 0}

    ours = _median_round([row("adaptive (default)", r, p) for r, p in ((40.0, 50.0), (44.0, 60.0), (30.0, 90.0))])
    assert (ours["requests_per_s"], ours["p99_ms"], ours["requests"], ours["rounds"]) == (40.0, 50.0, 1200,
                                                                                          [40.0, 44.0, 30.0])
    plain = _median_round([row(PLAIN_ONNX, r, 45.0) for r in (50.0, 40.0, 50.0)])
    off = _median_round([row("off", r, 45.0) for r in (40.0, 40.0, 40.0)])
    results = _results()
    results["serve"] = [ours, off, plain]
    table = report.markdown(results)
    # rounds' ratios 0.80, 1.10, 0.60: median 0.80, where the median rows' ratio would be 40 / 50 = 0.80 by luck only
    assert "requests/s: 1 clients 0.80x (0.60-1.10x) (p99 50.0 against 45.0 ms)." in table
    assert "One client: batching (adaptive) at 1.00x (0.75-1.10x) the requests/s of batching off." in table
    assert "each row its median of 3 rounds, every server started afresh in each" in table
