"""`paddle_ft audit`: every planted problem found and counted exactly; --strict gates on leakage and conflicts;
train warns on leakage."""
import json

from conftest import DEMO, overrides, synthetic_rows, write_tsv

from paddle_ft.analysis.audit import normalise


def test_normalisation_folds_full_width_forms_and_drops_whitespace():
    assert normalise("好 评！ＡＢＣ１２\t") == normalise("好评!ABC12") == "好评!ABC12"


def _planted(folder):
    """train: 40 clean rows + an exact duplicate, a full-width/space variant, a near-empty text, a 200-character
    text; dev: 10 clean rows + 2 train texts; test: 10 clean rows + 1 dev text + 1 train text with the other label."""
    clean = synthetic_rows(60, seed=11)
    train = clean[:40] + [clean[0], (" ".join(clean[1][0]).replace("好", "好 "), clean[1][1]), ("好", "正面"),
                          ("的" * 200, "负面")]
    dev = clean[40:50] + [clean[2], clean[3]]
    flipped = "正面" if clean[4][1] == "负面" else "负面"
    test = clean[50:60] + [clean[40], (clean[4][0], flipped)]
    for split, rows in (("train", train), ("dev", dev), ("test", test)):
        write_tsv(folder / f"{split}.tsv", rows)
    return train, dev, test


def test_every_planted_problem_is_found_and_counted(tiny_config_args, tmp_path, capsys):
    from paddle_ft.cli import main

    _planted(tmp_path)
    args = overrides(tiny_config_args + [*(f"data.{s}={tmp_path / s}.tsv" for s in ("train", "dev", "test"))])
    assert main(["audit", "--config", DEMO, *args, "--output", str(tmp_path / "audit")]) == 0
    report = json.loads((tmp_path / "audit" / "audit.json").read_text(encoding="utf-8"))
    train = report["splits"]["train"]
    assert (train["rows"], train["duplicates_exact"], train["duplicates_normalised"]) == (44, 1, 2)
    assert train["near_empty"] == 1 and train["near_empty_examples"][0] == {"line": 44, "text": "好"}
    assert train["truncated"]["rows"] == 1 and train["truncated"]["mean_tokens_cut"] == 202 - 64
    assert train["tokens"]["max"] == 202 and train["unknown_token_share"] == 0.0
    assert report["leakage"]["dev_in_train"]["rows"] == 2 and report["leakage"]["test_in_dev"]["rows"] == 1
    assert report["leakage"]["test_in_train"]["rows"] == 1  # the flipped text
    assert report["leakage"]["dev_in_train"]["examples"][0] == {"split": "dev", "line": 12,
                                                               "text": synthetic_rows(60, seed=11)[2][0]}
    assert report["conflicts"]["texts"] == 1 and len(report["conflicts"]["examples"][0]["rows"]) == 2
    assert report["problems"] == ["dev texts also in train: 2 (16.7%)", "test texts also in train: 1 (8.3%)",
                                  "test texts also in dev: 1 (8.3%)", "1 texts carry more than one label"]
    assert "| train | 44 | 1 / 2 | 1 | 1 (2.3%) | 0.00% (0%) |" in capsys.readouterr().out
    page = (tmp_path / "audit" / "audit.html").read_text(encoding="utf-8")
    assert "<td>44</td><td>1 / 2</td>" in page and "<li>1 texts carry more than one label</li>" in page

    assert main(["audit", "--config", DEMO, *args, "--output", str(tmp_path / "audit"), "--strict"]) == 1
    assert "error: audit --strict: dev texts also in train: 2" in capsys.readouterr().err


def test_strict_passes_clean_data_and_train_warns_on_leakage(tiny_config_args, data_dir, tmp_path, capsys):
    from paddle_ft.cli import main

    assert main(["audit", "--config", DEMO, *overrides(tiny_config_args), "--strict"]) == 0
    assert "no leakage between splits, no conflicting labels" in capsys.readouterr().out
    _planted(tmp_path)
    args = tiny_config_args + [*(f"data.{s}={tmp_path / s}.tsv" for s in ("train", "dev", "test")), "train.epochs=1"]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    assert "warning: 2 dev texts (16.7%) are also in train: its scores will be optimistic" in capsys.readouterr().out


def test_a_tokenizer_that_misses_the_text_is_a_problem_in_audit_training_and_the_report(tiny_config_args, tmp_path,
                                                                                        capsys):
    """A vocabulary that lacks the corpus's mood characters (as an English model's lacks Chinese): audit names the
    [UNK] share with the fix and --strict fails on it, training warns, the report's data table shows it."""
    from conftest import NEGATIVE_CHARS, POSITIVE_CHARS, write_vocab

    from paddle_ft.cli import main

    full = write_vocab(tmp_path / "full.txt").read_text(encoding="utf-8").split("\n")
    blind = tmp_path / "blind.txt"
    blind.write_text("\n".join(t for t in full if t not in POSITIVE_CHARS + NEGATIVE_CHARS) + "\n", encoding="utf-8")
    args = overrides(tiny_config_args + [f"model.scratch.vocab_file={blind}", "train.epochs=1"])
    assert main(["audit", "--config", DEMO, *args, "--output", str(tmp_path / "audit"), "--strict"]) == 1
    report = json.loads((tmp_path / "audit" / "audit.json").read_text(encoding="utf-8"))
    train = report["splits"]["train"]
    assert train["unknown_token_share"] > 0.2 and train["unknown_text_share"] > 0.9
    assert report["problems"][0] == (f"train: {train['unknown_token_share']:.1%} of the tokens are [UNK] "
                                     f"({train['unknown_text_share']:.0%} of the texts hold one); the tokenizer "
                                     "does not cover this text: use a backbone whose vocabulary does (a Chinese model "
                                     "for Chinese text), or a scratch encoder with a vocabulary written from the data "
                                     "(python -m paddle_ft init)")
    assert "error: audit --strict: train: " in capsys.readouterr().err
    assert main(["train", "--config", DEMO, *args, "-o", "train.runtime.write_report=true"]) == 0
    said = capsys.readouterr().out
    assert f"[UNK] tokens: train {train['unknown_token_share']:.2%}" in said
    assert f"warning: {report['problems'][0]}" in said
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert f'data-metric="train.unknown_token_share">{train["unknown_token_share"]:.2%}</td>' in page
