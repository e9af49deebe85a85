"""Each lab names its container namespaces apart, so labs never stop each other's containers."""

from __future__ import annotations

import pytest

from dflashops.lab.daemon import LabNetwork
from dflashops.lab.errors import LabError
from dflashops.lab.hosts import HOST_NAME_RE
from dflashops.lab.pve.containers import host_name


def test_default_lab_keeps_its_names() -> None:
    assert LabNetwork().container_prefix == "dfo-ct"
    assert host_name(200) == "dfo-ct200"


@pytest.mark.parametrize(
    ("node_host", "prefix"),
    [("dfo-nodek", "dfok-ct"), ("dfo-nodepx", "dfopx-ct"), ("pve-lab-7", "dfoab7-ct")],
)
def test_isolated_labs_get_their_own_prefix(node_host: str, prefix: str) -> None:
    network = LabNetwork(node_host=node_host)
    assert network.container_prefix == prefix
    name = host_name(200, network.container_prefix)
    assert name == f"{prefix}200" and name != host_name(200)
    assert HOST_NAME_RE.match(name)


def test_long_vmids_fall_back_to_hex_within_the_limit() -> None:
    assert host_name(999_999_999) == "dfo-3b9ac9ff"
    assert host_name(123_456, "dfok-ct") == "dfok-ct123456"
    with pytest.raises(LabError, match="no netns name"):
        host_name(999_999_999, "dfopx-ct")
