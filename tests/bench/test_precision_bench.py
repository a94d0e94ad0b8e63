"""tools/precision_bench.py's figures, without training: means, ranges and the 0.3-point bar (issue 66)."""
import subprocess
import sys
from pathlib import Path

import precision_bench
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bfloat16_is_judged_on_its_mean_test_accuracy_against_float32s():
    float32 = precision_bench.over_seeds({42: {"test_accuracy": 0.874, "dev_accuracy": 0.872, "samples_per_s": 20.0},
                                          43: {"test_accuracy": 0.872, "dev_accuracy": 0.874, "samples_per_s": 21.0}})
    bfloat16 = precision_bench.over_seeds({42: {"test_accuracy": 0.869, "dev_accuracy": 0.872, "samples_per_s": 33.0},
                                           43: {"test_accuracy": 0.873, "dev_accuracy": 0.871, "samples_per_s": 34.0}})
    precisions = {"float32": float32, "bfloat16": bfloat16}
    assert precision_bench.bar(precisions) == {"bfloat16_points_behind_float32": 0.2, "met": True}
    summary = {"config": "configs/demo.yaml", "seeds": [42, 43], "precisions": precisions,
               "machine": {"cpu": "AMD EPYC", "cpu_kind": "AVX-512+BF16", "cores": 2, "flags": ["avx512_bf16"]},
               "bar": precision_bench.bar(precisions)}
    table = precision_bench.markdown(summary)
    assert "| bfloat16 | 0.8710 (0.8690-0.8730) | 0.8690, 0.8730 | 0.8715 (0.8710-0.8720) | 33.5 |" in table
    assert table.rstrip().endswith("bfloat16 +0.20 points behind float32 on test (bar 0.3): met; 1.63x its training "
                                   "samples/s")
    bfloat16["test_accuracy"] = 0.869
    assert precision_bench.bar(precisions)["met"] is False  # 0.40 points behind


@pytest.mark.slow  # runs the tool as a process
def test_a_bad_config_is_one_line_naming_its_file_and_line_before_any_folder_is_made(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text("seed: 7\nsed: 3\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "precision_bench.py"), "--config", str(config),
                           "--output", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: tools/precision_bench.py: config key 'sed' ({config}:2): unknown key (did you mean seed?); known keys "
        "here: output_dir, task, seed, data, model, train, pretrain, distill (see tools/precision_bench.py --help)"]
    assert not (tmp_path / "out").exists()
