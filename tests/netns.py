"""Two hosts on one machine, for the multi-machine tests: two network namespaces joined by a veth pair (as root)."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2 to make two network namespaces")


@contextlib.contextmanager
def two_hosts(subnet: str):
    """[(namespace, interface, address)] of two hosts at `subnet`.1 and `subnet`.2 (a /24), removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    hosts = [(f"pft{tag}{side}", f"v{side}{tag}", f"{subnet}.{number}") for number, side in ((1, "a"), (2, "b"))]
    try:
        for namespace, _, _ in hosts:
            _netns("add", namespace)
        subprocess.run(["ip", "link", "add", hosts[0][1], "type", "veth", "peer", "name", hosts[1][1]], check=True)
        for namespace, link, address in hosts:
            subprocess.run(["ip", "link", "set", link, "netns", namespace], check=True)
            for command in (["addr", "add", f"{address}/24", "dev", link], ["link", "set", link, "up"],
                            ["link", "set", "lo", "up"]):
                _netns("exec", namespace, "ip", *command)
        yield hosts
    finally:
        for namespace, _, _ in hosts:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def _netns(*args):
    subprocess.run(["ip", "netns", *args], check=True, capture_output=True)
