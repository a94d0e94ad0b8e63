"""The bench's markdown table, ratios and PNG chart, from the results dictionary `run.py` builds."""
from __future__ import annotations

import statistics
from pathlib import Path

from bench.inference import ENGINES
from paddle_ft.io import atomic_path
from paddle_ft.runtime import cpu_kind

TRAIN_ENGINES = ("paddle_ft", "paddle_ft_bf16", "paddlenlp_trainer", "hf_trainer", "hf_trainer_group_by_length",
                 "hf_trainer_group_by_length_same_mkl", "hf_trainer_group_by_length_bf16")
TRAIN_TITLES = {"paddle_ft": "paddle_ft engine", "paddle_ft_bf16": "paddle_ft engine, bf16 matmuls",
                "paddlenlp_trainer": "PaddleNLP Trainer (defaults)", "hf_trainer": "HF Trainer (defaults)",
                "hf_trainer_group_by_length": "HF Trainer (group_by_length)",
                "hf_trainer_group_by_length_same_mkl": "HF Trainer (group_by_length, paddle_ft's MKL path)",
                "hf_trainer_group_by_length_bf16": "HF Trainer (group_by_length, bf16=True)"}
# the like-for-like peer of the headline ratio: the HF Trainer with length grouping and, where paddle_ft switches
# MKL's path (an AMD CPU), the same switch; without that row (another CPU), the one with length grouping
LIKE_FOR_LIKE = ("hf_trainer_group_by_length_same_mkl", "hf_trainer_group_by_length")


def ours_for(name: str) -> str:
    """paddle_ft's row a peer's row is compared with: the bfloat16 one for a bfloat16 peer."""
    return "paddle_ft_bf16" if name.endswith("_bf16") and name != "paddle_ft_bf16" else "paddle_ft"


FP32_ENGINES = ("paddle_inference", "paddle_inference_onednn", "onnxruntime")  # what backend auto chooses from


def ratios(results: dict) -> dict:
    """paddle_ft's training samples/s over each peer's; Paddle Inference + oneDNN over ONNX Runtime; backend auto
    over the fastest fp32 engine at each batch size; training's useful FLOP/s over the machine's matmul rate."""
    train = results["train"]
    out = {}
    for name in TRAIN_ENGINES[2:]:
        ours = train.get(ours_for(name), {})
        peer = train.get(name, {})
        out[f"train_vs_{name}"], out[f"train_vs_{name}_range"] = _round_ratio(ours, peer, "samples_per_s")
        # per real token: the same ratio where both timed the same texts (paddle_ft and the HF Trainers); PaddleNLP's
        # Trainer times a window of its random batches, whose mean length differs
        out[f"train_vs_{name}_per_token"], out[f"train_vs_{name}_per_token_range"] = _round_ratio(
            ours, peer, "real_tokens_per_s")
    peer = next((name for name in LIKE_FOR_LIKE if out[f"train_vs_{name}_per_token"]), None)
    out["train_like_for_like_per_token"] = out[f"train_vs_{peer}_per_token"] if peer else None
    out["train_like_for_like_per_token_range"] = out[f"train_vs_{peer}_per_token_range"] if peer else None
    out["train_bf16_vs_fp32_per_token"], out["train_bf16_vs_fp32_per_token_range"] = _round_ratio(
        train.get("paddle_ft_bf16", {}), train["paddle_ft"], "real_tokens_per_s")
    infer = results["infer"]
    for size in (1, 8, 32):
        key = f"batch_{size}"
        rows = {name: infer.get(name, {}).get(key, {}) for name in (*FP32_ENGINES, "auto")}
        speed = {name: row.get("samples_per_s") for name, row in rows.items()}
        out[f"infer_{key}_onednn_vs_onnxruntime"] = _ratio(speed["paddle_inference_onednn"], speed["onnxruntime"])
        fastest = max((name for name in FP32_ENGINES if speed[name]), key=lambda name: speed[name], default=None)
        out[f"infer_{key}_auto_vs_fastest_fp32"], out[f"infer_{key}_auto_vs_fastest_fp32_range"] = \
            _paired_ratio(rows["auto"], rows[fastest]) if fastest else (None, None)
    out["infer_batch_32_fastest_fp32"] = fastest  # the loop's last size
    # the low-precision engines (oneDNN bf16, int8) against the fastest fp32 engine first, not the slowest
    for name in (name for name in infer if name not in ENGINES) if fastest else ():
        out[f"infer_batch_32_{name}_vs_fastest_fp32"], out[f"infer_batch_32_{name}_vs_fastest_fp32_range"] = \
            _paired_ratio(infer[name]["batch_32"], infer[fastest]["batch_32"])
    out["train_useful_share_of_matmul"] = next((row["share"] for row in limit_rows(results)
                                                if row["name"] == "training: " + TRAIN_TITLES["paddle_ft"]), None)
    return out


def _round_ratio(row: dict, other: dict, key: str) -> tuple[float | None, list[float] | None]:
    """A training row's `key` over another's: the median and [min, max] of the two engines' ratio in each round both
    ran (run.py's "runs", in round order; the engines of a round run minutes apart, taking turns). Where either ran
    once (PaddleNLP's Trainer), the ratio of the two and no range."""
    rounds = [(a.get(key), b.get(key)) for a, b in zip(row.get("runs", []), other.get("runs", []))]
    return _over_rounds(rounds, _ratio(row.get(key), other.get(key)))


def _paired_ratio(row: dict, other: dict, key: str = "samples_per_s") -> tuple[float | None, list[float] | None]:
    """row's `key` over other's: the median and [min, max] over rounds of the two engines' ratio in each round,
    where both carry their rounds (each round's `key` under "rounds"). The engines of a round run within seconds of
    each other, and a shared machine's slow spells last longer: a round's ratio keeps little of them, where a ratio
    of medians keeps the spells of both."""
    rounds = list(zip(row.get("rounds", []), other.get("rounds", [])))
    return _over_rounds(rounds, _ratio(row.get(key), other.get(key)))


def _over_rounds(rounds: list[tuple], single: float | None) -> tuple[float | None, list[float] | None]:
    """The median and [min, max] of the rounds' own ratios (a, b) -> a / b; with fewer than two rounds, `single`
    (the ratio of the two rows) and no range."""
    pairs = [a / b for a, b in rounds if a and b]
    if len(pairs) < 2:
        return single, None
    return statistics.median(pairs), [min(pairs), max(pairs)]


def limit_rows(results: dict) -> list[dict]:
    """Each training row, and each inference row at batch 32, as useful GFLOP/s (limits.py) and as a share of the
    fastest matmul of its precision measured in the same run."""
    from bench.limits import forward_flops_per_token, train_flops_per_token

    gemm = results.get("limits", {}).get("gemm")
    if not gemm:
        return []
    shape = results["settings"]["shape"]
    fp32 = max(gemm[name]["gflops"] for name in gemm if name.endswith("fp32"))
    bf16 = gemm.get("paddle_ft_bf16", {}).get("gflops")
    rows = []
    for name in TRAIN_ENGINES:
        row = results["train"].get(name, {})
        limit = bf16 if name.endswith("bf16") else fp32  # a bf16 row against the bfloat16 GEMM
        if row.get("samples_per_s") and limit:
            length = row["real_tokens_per_s"] / row["samples_per_s"]
            useful = row["real_tokens_per_s"] * train_flops_per_token(shape, length) / 1e9
            rows.append({"name": "training: " + TRAIN_TITLES[name], "gflops": useful, "limit": limit,
                         "share": useful / limit})
    length, infer = results.get("infer_mean_tokens"), results["infer"]
    for name, row in ({} if "error" in infer or not length else infer).items():
        limit = gemm.get("onnxruntime_int8", {}).get("gflops") if name.endswith("int8") else \
            None if "bf16" in name or "gpu" in name else fp32
        if limit and row["batch_32"]["samples_per_s"]:
            useful = row["batch_32"]["samples_per_s"] * length * forward_flops_per_token(shape, length) / 1e9
            rows.append({"name": f"inference batch 32: {name}", "gflops": useful, "limit": limit,
                         "share": useful / limit})
    return rows


def _times(ratios: dict, key: str) -> str:
    """`ratios[key]` as the table prints it, with its range over rounds where `ratios` has one (`key`_range)."""
    return _as_times(ratios.get(key), ratios.get(f"{key}_range"))


def _as_times(value: float | None, spread: list[float] | None = None) -> str:
    """`1.28x (1.25-1.32x)` with a range over rounds, `6.00x` without one, "" for no ratio."""
    if value is None:
        return ""
    return f"{value:.2f}x" + (f" ({spread[0]:.2f}-{spread[1]:.2f}x)" if spread else "")


def _ratio(a, b):
    return a / b if a and b else None


def _num(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def markdown(results: dict) -> str:
    m, s = results["machine"], results["settings"]
    flags = ", ".join(m.get("cpu_flags", [])) or "none of AVX2/AVX-512/VNNI/BF16/AMX"
    lines = [f"Machine: {m['cpu']}, CPU kind {m.get('cpu_kind') or cpu_kind(m.get('cpu_flags', []))} ({flags}), "
             f"{m['usable_cores']} usable cores, {m['threads']} threads; Paddle "
             f"{m['paddle_version']}, PaddleNLP {m['paddlenlp_version']}; model {s['shape']['num_layers']} layers x "
             f"{s['shape']['hidden_size']} hidden x {s['shape']['num_heads']} heads (random weights, the demo's "
             f"character vocabulary), max length {s['shape']['max_length']}, batch {s['batch_size']}, fp32; "
             f"training: every engine one timed epoch over the same {s['measured_texts']:,} texts, after {s['warmup_steps']} steps on others (PaddleNLP's Trainer: "
             f"{s['paddlenlp_trainer_steps']} steps of them, the first {s['warmup_steps']} warm-up); inference: "
             f"medians of repeated rounds{' QUICK RUN' if s['quick'] else ''}.", "",
             "| training | samples/s | real tokens/s | padded tokens/s | padding | peak RSS MB | paddle_ft is "
             "(samples; a bf16 row: its bf16) | (real tokens) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in TRAIN_ENGINES:
        row = results["train"].get(name)
        if row is None:
            continue
        if row.get("samples_per_s") is None:
            lines.append(f"| {TRAIN_TITLES[name]} | {row.get('skipped') or row.get('error')} | | | | | | |")
            continue
        by_samples, by_tokens = (_times(results["ratios"], f"train_vs_{name}{kind}") for kind in ("", "_per_token"))
        lines.append(f"| {TRAIN_TITLES[name]} | {_num(row['samples_per_s'])} | {_num(row['real_tokens_per_s'], 0)} | "
                     f"{_num(row['padded_tokens_per_s'], 0)} | {row['padding_share']:.1%} | "
                     f"{_num(row.get('peak_rss_mb'), 0)} | {by_samples} | {by_tokens} |")
    rounds = len(results["train"]["paddle_ft"].get("runs", [])) or 1
    if results["ratios"].get("train_like_for_like_per_token"):
        peer = next(name for name in LIKE_FOR_LIKE if results["ratios"].get(f"train_vs_{name}_per_token"))
        lines += ["", f"Like for like (per real token, against {TRAIN_TITLES[peer]}): paddle_ft "
                      f"{_times(results['ratios'], 'train_like_for_like_per_token')}."]
    if results["ratios"].get("train_bf16_vs_fp32_per_token"):
        lines += ["", "paddle_ft's bf16 matmuls against its float32, per real token: "
                      f"{_times(results['ratios'], 'train_bf16_vs_fp32_per_token')}."]
    lines += ["", f"A training ratio is the median of the two engines' ratio in each of the {rounds} rounds (the "
                  "engines taking turns), its range in brackets; a row's rates are its median run."]
    lines += _limit_lines(results)
    lines += ["", "| AMP vs fp32 | samples/s | epoch (min) | peak memory MB | largest batch | final accuracy |",
              "|---|---:|---:|---:|---:|---:|"]
    for row in results["amp"]["rows"]:
        lines.append(f"| {row['precision']} | {_num(row['samples_per_s'])} | {_num(row['epoch_minutes'])} | "
                     f"{_num(row['peak_memory_mb'], 0)} | {row['largest_batch'] or 'n/a'} | "
                     f"{_num(row['final_accuracy'], 4)} |")
    lines += ["", f"{results['amp']['note']}.", ""]
    infer = results["infer"]
    if "error" in infer:
        lines.append(f"inference: {infer['error']}")
    else:
        lines += ["| inference | batch 1 samples/s | batch 8 | batch 32 | p50 ms (batch 1) | p99 ms | max abs diff vs dygraph |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, row in infer.items():
            lines.append(f"| {name} | " + " | ".join(_num(row[f"batch_{n}"]["samples_per_s"]) for n in (1, 8, 32))
                         + f" | {row['batch_1_p50_ms']:.2f} | {row['batch_1_p99_ms']:.2f} | {row['max_abs_diff']:.2g} |"
                         + ("" if name in ENGINES else f" (top label as fp32: {row['batch_32']['label_agreement']:.1%})"))
        for reason in results.get("infer_precision_skipped", []):
            lines.append(f"| {reason.split(':')[0]} | not measured:{reason.split(':', 1)[1]} | | | | | |")
    ratio = results["ratios"].get("infer_batch_32_onednn_vs_onnxruntime")
    if ratio:
        lines += ["", f"Paddle Inference + oneDNN vs ONNX Runtime at batch 32: {ratio:.2f}x."]
    auto = [results["ratios"].get(f"infer_batch_{n}_auto_vs_fastest_fp32") for n in (1, 8, 32)]
    if all(auto):
        route = (results.get("auto_route") or {}).get("fp32", {}).get("points", [])
        lines += ["", "backend auto (the default) against the fastest fp32 engine: "
                  + ", ".join(f"batch {n} {_times(results['ratios'], f'infer_batch_{n}_auto_vs_fastest_fp32')}"
                              for n in (1, 8, 32))
                  + "; its route, measured at load: "
                  + ", ".join(f"batch {p['batch']} -> {p['engine']}" for p in route) + "."]
    lines += _low_precision_lines(results) + _int8_lines(results) + _model_lines(results) + _serve_lines(results)
    tok = results["tokenizer"]
    if "error" not in tok:
        lines += ["", "| tokenizer | texts/s |", "|---|---:|"]
        lines += [f"| {name} ({row['class']}) | {_num(row['texts_per_s'], 0)} |" for name, row in tok.items()
                  if isinstance(row, dict) and "texts_per_s" in row]
    return "\n".join(lines) + "\n"


def _limit_lines(results: dict) -> list[str]:
    gemm, rows = results.get("limits", {}).get("gemm"), limit_rows(results)
    if not gemm:
        return ["", f"matmul rate: {results.get('limits', {}).get('error', 'not measured')}"]
    rates = ", ".join(f"{name.replace('_', ' ')} {value['gflops']:,.0f} GFLOP/s ({'x'.join(map(str, value['shape']))})"
                      for name, value in gemm.items())
    lines = ["", f"The limit, measured in this run: matmul {rates}. Useful work is the encoder's matmul FLOPs per "
                 "real token (padding, dropout, norms and the optimizer are overhead):", "",
             "| against the limit | useful GFLOP/s | matmul GFLOP/s | share |", "|---|---:|---:|---:|"]
    lines += [f"| {row['name']} | {row['gflops']:,.1f} | {row['limit']:,.0f} | {row['share']:.1%} |" for row in rows]
    profile = results.get("profile", {})
    if "shares" in profile:
        lines += ["", f"Where paddle_ft's training step goes (paddle.profiler, wall time of {profile['steps']} "
                      "steps after warm-up): " + ", ".join(f"{group} {share:.1%}"
                                                           for group, share in profile["shares"].items()) + "."]
    return lines


def _low_precision_lines(results: dict) -> list[str]:
    ratios = results["ratios"]
    shown = [f"{name} {_times(ratios, f'infer_batch_32_{name}_vs_fastest_fp32')}" for name in results["infer"]
             if name not in ENGINES and ratios.get(f"infer_batch_32_{name}_vs_fastest_fp32")]
    if not shown:
        return []
    return ["", f"Low precision against the fastest fp32 engine at batch 32 ({ratios['infer_batch_32_fastest_fp32']}), "
                f"samples/s: {', '.join(shown)}."]


def _int8_lines(results: dict) -> list[str]:
    check, infer = results.get("int8_check"), results["infer"]
    if not check or "onnxruntime_int8" not in infer:
        return []
    speed = _ratio(infer["onnxruntime_int8"]["batch_32"]["samples_per_s"],
                   infer["onnxruntime"]["batch_32"]["samples_per_s"])
    drop = 100 * (check["accuracy_int8"] - check["accuracy_fp32"])
    return ["", f"INT8 (paddle_ft quantize, {check['method']}): test accuracy {check['accuracy_int8']:.4f} against "
                f"fp32's {check['accuracy_fp32']:.4f} ({drop:+.2f} points), "
                f"the same label on {check['agreement']:.1%} of {check['texts']} texts; batch 32 "
                f"{_num(speed, 2)}x ONNX Runtime fp32."]


def _model_lines(results: dict) -> list[str]:
    rows = results.get("models")
    if not rows or "error" in rows:
        return [] if not rows else ["", f"teacher/student: {rows['error']}"]
    lines = ["", "| model (default backend) | test accuracy | batch 1 p50 ms | batch 1 samples/s "
                 "| batch 32 samples/s |",
             "|---|---:|---:|---:|---:|"]
    for name in ("teacher", "student"):
        row = rows[name]
        lines.append(f"| {name} ({row['model_dir']}) | {row['test_accuracy']:.4f} | {row['batch_1_p50_ms']:.2f} | "
                     f"{_num(1000 / row['batch_1_p50_ms'])} | {_num(row['batch_32']['samples_per_s'])} |")
    teacher, student = rows["teacher"], rows["student"]
    lines += ["", f"The student keeps {student['test_accuracy'] / teacher['test_accuracy']:.1%} of the teacher's test "
                  f"accuracy at {teacher['batch_1_p50_ms'] / student['batch_1_p50_ms']:.2f}x its batch-1 speed."]
    return lines


def _serve_lines(results: dict) -> list[str]:
    if not results.get("serve"):
        return []
    from bench.serving import PLAIN_ONNX
    from bench.serving import markdown as serve_table

    rows = results["serve"]
    served = {(r["batching"], r["concurrency"]): r for r in rows}
    rounds = len(rows[0].get("rounds", [])) or 1
    alone = _served_ratio(served.get(("adaptive (default)", 1)), served.get(("off", 1)))
    lines = ["", "HTTP service on the bench's export (client and server share the machine"
                 + (f"; each row its median of {rounds} rounds, every server started afresh in each" if rounds > 1
                    else "") + "):", "",
             serve_table(rows).rstrip(),
             "", f"One client: batching (adaptive) at {alone or 'n/a'} the requests/s of batching off."]
    against_plain = [f"{level} clients {_served_ratio(ours, plain)} "
                     f"(p99 {_num(ours['p99_ms'])} against {_num(plain['p99_ms'])} ms)"
                     for (name, level), ours in served.items() if name == "adaptive (default)"
                     for plain in [served.get((PLAIN_ONNX, level))] if plain]
    if against_plain:
        lines.append(f"paddle_ft serve (adaptive) against {PLAIN_ONNX}, requests/s: {'; '.join(against_plain)}.")
    return lines


def _served_ratio(row: dict | None, other: dict | None) -> str:
    """One served row's requests/s over another's, printed with its range over the load test's rounds."""
    return _as_times(*_paired_ratio(row, other, "requests_per_s")) if row and other else ""


def chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [n for n in TRAIN_ENGINES if results["train"].get(n, {}).get("samples_per_s") is not None]
    values = [results["train"][n]["samples_per_s"] for n in names]
    left.barh([TRAIN_TITLES[n] for n in names], values, color=["tab:blue"] + ["tab:gray"] * (len(names) - 1))
    left.set_xlabel("training samples/s (higher is better)")
    left.invert_yaxis()
    for y, v in enumerate(values):
        left.text(v, y, f" {v:.1f}", va="center")
    left.set_xlim(0, 1.15 * max(values, default=1))  # room for the value labels
    infer = results["infer"]
    if "error" not in infer:
        sizes, shown = (1, 8, 32), [name for name in infer if name in ENGINES or "gpu" not in name]
        width = 0.8 / len(shown)  # every CPU row, the reduced precisions (bf16, int8) included
        for i, name in enumerate(shown):
            xs = [j + (i - (len(shown) - 1) / 2) * width for j in range(len(sizes))]
            right.bar(xs, [infer[name][f"batch_{n}"]["samples_per_s"] for n in sizes], width, label=name)
        right.set_xticks(range(len(sizes)), [f"batch {n}" for n in sizes])
        right.set_ylabel("inference samples/s")
        top = max(infer[name][f"batch_{n}"]["samples_per_s"] for name in shown for n in sizes)
        right.set_ylim(0, 1.3 * top)  # the legend sits above the bars
        right.legend(fontsize=8, ncol=2, loc="upper center")
    m = results["machine"]
    figure.suptitle(f"paddle_ft bench: {m['cpu']}, {m['threads']} threads, Paddle {m['paddle_version']}")
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=100)
    plt.close(figure)
