"""Messages that mislead, and bounds (issue 27, roots 6 and 9): each a one-line error that says what is wrong and
what to do, where there was a wrong hint, a traceback or another program's text."""
import re
import socket

import pytest
from conftest import DEMO, export_tiny_model, overrides, write_tsv

from paddle_ft.cli import main
from paddle_ft.config import load_config
from paddle_ft.data.readers import Columns, read_examples
from paddle_ft.errors import ConfigError, DataError


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("name, fmt, content, fragment", [
    ("d.csv", "tsv", "text,label\n好,正面\n", "read as tab-separated, the header is one column 'text,label': the file "
                                             "looks CSV; set data.format: csv (or give it a .csv name)"),
    ("d.tsv", "csv", "text\tlabel\n好\t正面\n", "read as comma-separated, the header is one column 'text\\tlabel': the "
                                               "file looks TSV; set data.format: tsv")])
def test_a_file_read_with_the_other_delimiter_says_which_format_to_set(tmp_path, name, fmt, content, fragment):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{path}:1: {fragment}")):
        read_examples(path, fmt, Columns())


def test_an_unknown_label_first_points_at_data_labels(tmp_path):
    path = write_tsv(tmp_path / "d.tsv", [("好", "正面"), ("还行", "中性")])
    with pytest.raises(DataError, match=r":3: label '中性' is not one of 正面, 负面 \(if it is a real label, add it to "
                                        r"data.labels\) \(fix the row, or use data.on_bad_row=skip"):
        read_examples(path, "tsv", Columns(), frozenset({"正面", "负面"}), skip_option="data.on_bad_row=skip")


def test_a_package_past_its_pin_is_one_line_with_the_command_that_fixes_it(monkeypatch, capsys):
    """A newer huggingface_hub beside paddlenlp 2.8.1 made every command die with a 22-line ImportError."""
    import importlib.metadata

    import paddle_ft.cli as cli
    import paddle_ft.commands.eval as evaluate

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda package: "0.27.1" if package == "huggingface_hub" else real(package))

    def import_fails(args):
        raise ImportError("cannot import name 'repo_type_and_id_from_hf_id' from 'huggingface_hub.utils'")

    monkeypatch.setattr(evaluate, "main", import_fails)
    assert cli.main(["eval", "--model", "M", "--data", "D"]) == 2
    assert error_line(capsys) == ("error: huggingface_hub 0.27.1 is installed, but paddlenlp 2.8.1 imports only with "
                                  "huggingface_hub<0.26: pip install 'huggingface_hub<0.26'")


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    return export_tiny_model(tmp_path_factory.mktemp("model"))


def test_serve_on_a_port_in_use_or_a_host_this_machine_lacks_is_one_line(export_dir, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--export", str(export_dir), "--port", str(port)]) == 2
        assert error_line(capsys) == (f"error: cannot listen on 127.0.0.1:{port} (Address already in use); choose "
                                      "another --port, or stop what uses it")
    assert main(["serve", "--export", str(export_dir), "--host", "no-such-host.invalid", "--port", "0"]) == 2
    assert error_line(capsys).startswith("error: --host no-such-host.invalid: not an address of this machine")


def test_augmentation_copies_are_bounded_before_any_row_is_made():
    """copies=1000000000 grew memory without limit."""
    with pytest.raises(ConfigError, match=r"'data.augment.copies'.*an integer from 0 to 20"):
        load_config(DEMO, ["data.augment.copies=1000000000"])


def test_report_on_a_pretraining_run_says_it_is_one(tmp_path, capsys):
    from paddle_ft.artifacts.ownership import owned_folder

    with owned_folder(tmp_path / "pre", "pretrain", "output_dir"):
        pass
    assert main(["report", str(tmp_path / "pre")]) == 2
    assert error_line(capsys) == (f"error: {tmp_path / 'pre'} is a pretraining run; give report the output_dir of a "
                                  "training or distillation run")


def test_a_non_utf8_corpus_line_is_named_by_file_and_line(tiny_config_args, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("好棒\n差坏\n".encode() + b"\xff\xfe bad\n")
    keep = [a for a in tiny_config_args if a.startswith(("model.scratch.", "data.max_length"))]
    assert main(["pretrain", "--config", DEMO, *overrides([*keep, f"output_dir={tmp_path / 'out'}",
                                                           f"pretrain.corpus=[{corpus}]", "data.train=null",
                                                           "data.dev=null", "data.test=null",
                                                           "train.evaluation.metric=masked_accuracy"])]) == 2
    assert error_line(capsys) == f"error: {corpus}:3: bytes that are not UTF-8 at byte 0; re-save the file as UTF-8"


def test_without_data_format_each_file_is_read_by_its_extension(tmp_path):
    from paddle_ft.workflows.build import read_dataset

    (tmp_path / "train.csv").write_text('text,label\n"好,棒",正面\n差,负面\n', encoding="utf-8")
    write_tsv(tmp_path / "dev.tsv", [("好", "正面"), ("差", "负面")])
    config = load_config(DEMO, [f"data.train={tmp_path / 'train.csv'}", f"data.dev={tmp_path / 'dev.tsv'}",
                                "data.test=null"])
    dataset = read_dataset(config.data)
    assert [e.text for e in dataset.examples["train"]] == ["好,棒", "差"] and len(dataset.examples["dev"]) == 2


def test_predict_names_its_own_flags_not_an_inner_layers_arguments(tmp_path, capsys):
    """Issue 64, root 9: `--top-k 3` of a 2-label model said `k=3`."""
    from conftest import export_tiny_model

    export = export_tiny_model(tmp_path / "model")
    assert main(["predict", "--export", str(export), "--text", "好", "--top-k", "3"]) == 2
    assert capsys.readouterr().err == "error: --top-k 3: the model has 2 labels; give 1 to 2\n"
