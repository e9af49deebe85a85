"""A loopback host hands its sessions the variables it was given (sshd's ``SetEnv``): how a GPU
machine made its own "container" (benchmarks/gpu_compare_device.py) gives the sessions its driver
libraries and CUDA tools, which sshd's fresh session environment would otherwise drop."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.lab.errors import LabError
from dflashops.lab.hosts import loopback_unavailable_reason, start_loopback_host, stop_host
from dflashops.lab.sshd import write_sshd_config
from tests.support.ssh_hosts import connect_to

pytestmark = pytest.mark.timeout(60)


def test_sessions_get_the_hosts_variables(tmp_path: Path) -> None:
    reason = loopback_unavailable_reason()
    if reason:
        pytest.skip(f"loopback SSH host unavailable: {reason}")
    wanted = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/opt/x lib", "DFO_SESSION": "1"}
    host = start_loopback_host("envhost", workdir=tmp_path, session_env=wanted)
    try:
        with connect_to(host) as conn:
            out = conn.run('printf \'%s|%s\' "$LD_LIBRARY_PATH" "$DFO_SESSION"').stdout
    finally:
        stop_host(host)
    assert out == "/usr/local/nvidia/lib64:/opt/x lib|1"


@pytest.mark.parametrize(
    ("name", "value"), [("LD_LIBRARY_PATH", 'a"b'), ("BAD NAME", "x"), ("X", "a\nb")]
)
def test_a_variable_sshd_cannot_carry_is_refused(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(LabError, match=r"cannot pass .* through sshd's SetEnv"):
        write_sshd_config(tmp_path, address="127.0.0.1", port=2222, session_env={name: value})
