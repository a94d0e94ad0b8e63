"""Issue 43, root 7: `predict --ray ADDRESS` with nothing listening there fails in one line naming the address, at
once, instead of Ray waiting for the cluster without end (no cluster is started here)."""
import socket
import time

import pytest
from conftest import export_tiny_model, synthetic_rows, write_tsv

from paddle_ft.cli import main


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once the socket closes: nothing listens there


@pytest.mark.parametrize("address, fragment", [
    ("127.0.0.1:{port}", "nothing answers there"),
    ("ray://127.0.0.1:{port}", "nothing answers there"),
    ("my-cluster", "give the head's host:port"),
])
def test_an_address_where_nothing_listens_is_one_line_at_once(address, fragment, tmp_path, capsys):
    export = export_tiny_model(tmp_path / "model")
    write_tsv(tmp_path / "in.tsv", synthetic_rows(10, seed=1))
    address = address.format(port=closed_port())
    started = time.monotonic()
    assert main(["predict", "--export", str(export), "--input", str(tmp_path / "in.tsv"), "--output",
                 str(tmp_path / "out"), "--ray", address]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert err.startswith(f"error: --ray {address}: {fragment}") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
