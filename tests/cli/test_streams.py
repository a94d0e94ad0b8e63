"""Issue 43, root 9: standard output carries a command's answer alone. The commands that answer in JSON (eval,
predict without --output-file, explain) print nothing else there: their status and progress lines go to standard
error."""
import json
import re

import pytest
from conftest import DEMO, overrides, write_tsv

from paddle_ft.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import tiny_run_args, write_splits, write_vocab

    root = tmp_path_factory.mktemp("streams")
    data = write_splits(root / "data", (240, 60, 60))
    assert main(["train", "-c", DEMO, *overrides(tiny_run_args(data, write_vocab(root / "vocab.txt"),
                                                               root / "out"))]) == 0
    assert main(["export", "--model", str(root / "out" / "best"), "--output", str(root / "export")]) == 0
    return root


def json_lines(out: str) -> list[dict]:
    assert out.strip(), "nothing on standard output"
    return [json.loads(line) for line in out.splitlines()]  # any status line would fail to parse here


def test_eval_prints_one_json_document_and_its_summary_line_beside_it(run, capsys):
    capsys.readouterr()
    assert main(["eval", "--model", str(run / "out" / "best"), "--data", str(run / "data" / "test.tsv")]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["examples"] == 60
    # issue 63: 117 lines of JSON and no summary; the one line goes to standard error
    assert err.splitlines()[-1] == (f"eval: accuracy {report['accuracy']:.4f}, macro_f1 {report['macro_f1']:.4f} on "
                                    f"60 texts of {run / 'data' / 'test.tsv'}; misclassified rows in "
                                    f"{report['misclassified_file']}")


def test_predict_prints_json_lines_only_even_when_it_skips_bad_rows(run, tmp_path, capsys):
    path = write_tsv(tmp_path / "in.tsv", [("好", "x"), ("  ", "x"), *[(f"评论{i}", "x") for i in range(60)]])
    capsys.readouterr()
    assert main(["predict", "--export", str(run / "export"), "--input", str(path), "--on-bad-row", "skip"]) == 0
    out, err = capsys.readouterr()
    assert len(json_lines(out)) == 61 and "left out 1 bad rows" in err


def test_explain_prints_json_lines_only_while_it_indexes_the_training_file(run, capsys):
    capsys.readouterr()
    assert main(["explain", "--model", str(run / "out" / "best"), "--text", "好", "--text", "坏", "--steps", "8"]) == 0
    out, err = capsys.readouterr()
    assert len(json_lines(out)) == 2 and "explain: indexing" in err
    assert re.search(r"explained 2 text\(s\) in [\d.]+ s: [\d.]+ s a text at 8 integrated-gradients steps", err)
