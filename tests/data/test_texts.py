"""What a text is, and what the Python API takes (issue 27, roots 5 and 7): a text is what the tokenizer reads, one
rule for Predictor, Classifier, predict and the server; a line of a .txt file ends at a line feed; the API checks
its arguments as the command line does."""
import json
import os
import re
import unicodedata

import numpy as np
import pytest
from conftest import DEMO, export_tiny_model, overrides, write_tsv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paddle_ft.cli import main
from paddle_ft.data.corpus import read_corpus
from paddle_ft.errors import UserError
from paddle_ft.inference.options import PredictOptions
from paddle_ft.tokenization import NO_TOKEN

UNREADABLE = ["", "   ", "\u200b\u200b", "\x01\x02", "\u2060\ufeff", "\t\u200d "]


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    return export_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def predictor(export_dir):
    from paddle_ft.inference.predictor import Predictor

    return Predictor(export_dir, PredictOptions(cpu_threads=1))


@pytest.fixture(scope="module")
def classifier(export_dir):
    from paddle_ft import Classifier

    return Classifier(export_dir, cpu_threads=1)


def predict_cli(export_dir, *args) -> tuple[int, list[dict], str]:
    """(exit status, the JSON records printed, the error lines) of an in-process `predict`."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["predict", "--export", str(export_dir), *args])
    return code, [json.loads(line) for line in out.getvalue().split("\n") if line], err.getvalue()


@pytest.mark.parametrize("text", UNREADABLE)
def test_a_text_the_tokenizer_reads_as_nothing_is_refused_alike_by_predictor_classifier_and_predict(
        text, predictor, classifier, export_dir):
    with pytest.raises(UserError, match=f"^text 1 {re.escape(NO_TOKEN)}$"):
        predictor.predict(["好", text])
    with pytest.raises(UserError, match=f"^text 1 {re.escape(NO_TOKEN)}$"):
        classifier(["好", text])
    code, records, err = predict_cli(export_dir, "--text", "好", "--text", text)
    assert (code, records, err) == (2, [], f"error: --text #2 {NO_TOKEN}\n")


def test_a_txt_line_ends_at_a_line_feed_only_for_predict_and_pretraining(export_dir, tmp_path):
    path = tmp_path / "three.txt"
    path.write_bytes("好\u2028棒\r\n差\x0c坏\n\n烂\n".encode("utf-8"))  # 3 texts: U+2028 and a form feed inside lines
    code, records, _ = predict_cli(export_dir, "--input", str(path))
    assert code == 0 and [(r["text"], r["line"]) for r in records] == [("好\u2028棒", 1), ("差\x0c坏", 2), ("烂", 4)]
    assert read_corpus((str(path),), "text") == (["好\u2028棒", "差\x0c坏", "烂"],
                                                 [(str(path), 1), (str(path), 2), (str(path), 4)])


def test_a_file_line_the_model_reads_as_nothing_is_named_by_file_and_line(export_dir, tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("好棒\n\u200b\u200b\n差\n", encoding="utf-8")
    code, records, err = predict_cli(export_dir, "--input", str(path))
    assert (code, records, err) == (2, [], f"error: {path}:2: the text {NO_TOKEN}; fix the line or remove it\n")


@pytest.mark.parametrize("command", ["train", "eval", "label-issues", "export-tasks"])
def test_a_row_the_model_reads_as_nothing_is_named_by_file_and_line_by_every_reader_of_rows(
        command, tiny_config_args, export_dir, tmp_path, capsys):
    """Issue 64, root 7: eval scored zero-width and control-only rows that train refused. The rule now sits in the
    reader of labelled rows itself, so every command that reads them refuses alike."""
    bad = write_tsv(tmp_path / "bad.tsv", [("好棒", "正面"), ("\u200b\x01", "负面"), ("差", "负面")])
    model = export_dir.parent / "best"
    args = {"train": ["train", "--config", DEMO, *overrides(tiny_config_args + [f"data.train={bad}"])],
            "eval": ["eval", "--model", str(model), "--data", str(bad)],
            "label-issues": ["label-issues", "--config", DEMO, *overrides(tiny_config_args + [f"data.train={bad}"]),
                             "--output", str(tmp_path / "issues")],
            "export-tasks": ["export-tasks", "--model", str(model), "--input", str(bad), "--to", "doccano",
                             "--output-file", str(tmp_path / "tasks.jsonl")]}[command]
    assert main(args) == 2
    # the way to leave bad rows out where the command has one (a config's data.on_bad_row), never one it lacks
    fix = ", or use data.on_bad_row=skip to drop bad rows" if command in ("train", "label-issues") else " or remove it"
    assert capsys.readouterr().err.endswith(f"error: {bad}:3: the text in column 'text' {NO_TOKEN} (fix the row{fix})"
                                            "\n")


def test_the_python_api_checks_its_arguments_as_the_cli_does(predictor, classifier, export_dir):
    from paddle_ft import Classifier
    from paddle_ft.inference.predictor import Predictor

    with pytest.raises(UserError, match=r"give a list of texts, not one str \('很好'\): a string would be read as "
                                        "one text per character"):
        predictor.predict("很好")
    as_list = predictor.predict(["很好", "差"])
    assert predictor.predict(np.array(["很好", "差"])) == as_list  # a numpy array of strings is a list of texts
    assert predictor.predict(("很好", "差")) == as_list
    with pytest.raises(UserError, match=r"^k=0: give an integer from 1 to 2$"):
        as_list[0].top(0)
    with pytest.raises(UserError, match=r"^batch_size=0: give an integer >= 1$"):
        predictor.predict(["好"], batch_size=0)
    with pytest.raises(UserError, match=r"^cpu_threads=0: give an integer >= 1 or None$"):
        Classifier(export_dir, cpu_threads=0)
    with pytest.raises(UserError, match=r"^gpu_id=-1: give an integer >= 0$"):
        Predictor(export_dir, PredictOptions(gpu_id=-1))
    with pytest.raises(UserError, match=r"^top_k=True: give an integer from 1 to 2$"):
        classifier("好", top_k=True)


PROPERTY_BUDGET = settings(max_examples=int(os.environ.get("PADDLE_FT_PROPERTY_EXAMPLES") or 60),
                           derandomize="PADDLE_FT_PROPERTY_EXAMPLES" not in os.environ, deadline=None,
                           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# any code point but surrogates (not text) and line breaks (a --text is one line), weighted towards the ones that
# make a text unreadable: blanks, controls, format characters
unicode_texts = st.text(st.one_of(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                                  st.sampled_from("\u200b\u200d\u2060\ufeff\x01\x7f \t\u3000好差")), max_size=12)


@pytest.fixture(scope="module")
def server(export_dir, tmp_path_factory):
    from test_serve import Server

    server = Server(export_dir, tmp_path_factory.mktemp("log") / "server.log", "--max-wait-ms", "1")
    yield server
    assert server.stop() == 0


@pytest.mark.slow  # starts a server
@PROPERTY_BUDGET
@given(texts=st.lists(unicode_texts, min_size=1, max_size=4))
def test_every_text_gets_one_prediction_from_all_four_or_is_refused_by_all_four_alike(
        texts, predictor, classifier, server, export_dir):
    def refusal(call) -> str | None:
        """The message after the text's name (`text 2`, `--text 2`, `texts[2]`), or None when answered."""
        try:
            call()
        except UserError as exc:
            return str(exc).split(" ", 2)[-1] if str(exc).startswith(("text ", "--text ")) else str(exc)
        return None

    refused = refusal(lambda: predictor.predict(texts))
    assert refusal(lambda: classifier(texts)) == refused
    code, records, err = predict_cli(export_dir, *[f"--text={text}" for text in texts])  # "-x" is no option
    response = server.classify(texts)
    if refused is not None:
        assert code == 2 and err.count("\n") == 1 and err.endswith(f" {refused}\n"), err
        assert response.status_code == 422 and response.json()["error"]["message"].endswith(f"] {refused}")
        return
    expected = predictor.predict(texts)
    assert code == 0 and len(records) == len(texts) == len(expected)  # N texts in, N predictions out
    assert [r["label"] for r in records] == [p.label for p in expected]
    served = response.json()["results"]
    assert [r["label"] for r in served] == [p.label for p in expected]
    for record, from_server, prediction in zip(records, served, expected):
        assert abs(record["score"] - prediction.score) < 1e-5 and abs(from_server["score"] - prediction.score) < 1e-5
    # one answer format (Prediction.as_dict): predict's rows are the Classifier's answers with the text in front
    assert [{k: v for k, v in r.items() if k not in ("text", "line")} for r in records] == classifier(texts)
    assert [set(r) for r in served] == [set(a) for a in classifier(texts)]


@pytest.mark.parametrize("mode, kept", [("head", "好" * 1024), ("tail", "差" * 1024), ("head_tail", "好" * 1024 + "差" * 1024),
                                        ("sliding_window", None)])
def test_a_text_of_millions_of_characters_is_cut_to_what_its_kept_tokens_can_come_from(mode, kept):
    """Issue 27, root 6: a 4.9M-character text was tokenised whole before truncation (3.7 GB)."""
    from paddle_ft.text import CHARACTERS_PER_TOKEN, Truncation

    text = "好" * 2_000_000 + "差" * 2_000_000
    assert CHARACTERS_PER_TOKEN * 64 == 1024
    assert Truncation(mode).characters_read(text, 64) == (kept if kept is not None else text)
    assert Truncation(mode).characters_read("好差" * 100, 64) == "好差" * 100  # short texts are read whole


def test_the_predictor_reads_a_huge_text_as_its_head_and_says_it_was_cut(predictor):
    huge, head = predictor.predict(["好棒" * 1_000_000, "好棒" * 32])
    assert huge.probabilities == pytest.approx(head.probabilities, abs=1e-6) and huge.truncated and head.truncated


def test_predict_reads_a_table_by_the_text_column_the_model_was_trained_on(tmp_path):
    export = export_tiny_model(tmp_path / "model")
    meta = json.loads((export / "export.json").read_text(encoding="utf-8"))
    meta["model"]["text_column"] = "review"  # as if trained with data.text_column: review
    (export / "export.json").write_text(json.dumps(meta), encoding="utf-8")
    table = write_tsv(tmp_path / "reviews.tsv", [("好棒", "x"), ("差坏", "y")], header=("review", "id"))
    code, records, _ = predict_cli(export, "--input", str(table))
    assert code == 0 and [(r["text"], r["line"]) for r in records] == [("好棒", 2), ("差坏", 3)]


@pytest.mark.slow  # a few hundred examples
@PROPERTY_BUDGET
@given(text=unicode_texts)
def test_the_rule_is_the_tokenizers_view_every_text_it_refuses_reads_as_no_token_and_back(text, predictor):
    """`readable` (a letter, digit, punctuation or symbol) against what PaddleNLP's BERT tokenizer makes of the text:
    a readable text gives a token; one that is not gives none (spacing marks aside, which it keeps as [UNK] and the
    rule refuses: a text of marks on nothing is no text)."""
    from paddle_ft.tokenization import readable

    slow = predictor.tokenizer.slow  # PaddleNLP's own tokenizer, under the Rust one
    tokens = slow.tokenize(text)
    if readable(text):
        assert tokens, text
    elif not any(unicodedata.category(c) in ("Mc", "Me") for c in text):
        assert tokens == [], text
