"""Isolated labs for tests: their own bridge, subnet, API port, node host, state and run folders,
so a user's lab (or another test module's) on the same machine is never touched."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dflashops.lab.hosts import netns_unavailable_reason


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_lab() -> None:
    """Skip, saying why, where a lab cannot run (not root, no network namespaces)."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)


def isolated_lab_env(
    workdir: Path,
    *,
    tag: str,
    cidr: str,
    node_spec: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The environment that points `dflashops lab …` at a lab of its own, and every other
    command at that lab's inventory (the lab is never the default inventory).

    ``tag`` (one letter or two) names the bridge ``dfolab<tag>0``, the node host
    ``dfo-node<tag>`` and the run folder; ``cidr`` must be a /24 inside 10.200.0.0/16.
    """
    state = workdir / "lab"
    env = {
        **os.environ,
        "DFLASHOPS_LAB_STATE": str(state),
        "DFLASHOPS_INVENTORY": str(state / "inventory.yaml"),  # where `lab up` writes it
        "DFLASHOPS_LAB_RUN": f"/run/dflashops-lab{tag}",
        "DFLASHOPS_LAB_BRIDGE": f"dfolab{tag}0",
        "DFLASHOPS_LAB_CIDR": cidr,
        "DFLASHOPS_LAB_API_PORT": str(free_port()),
        "DFLASHOPS_LAB_NODE_HOST": f"dfo-node{tag}",
    }
    if node_spec is not None:
        spec_file = workdir / "node-spec.json"
        spec_file.write_text(json.dumps(node_spec))
        env["DFLASHOPS_LAB_NODE_SPEC"] = str(spec_file)
    return env


def run_cli(
    env: dict[str, str], *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m dflashops.cli ARGS`` in ``env``; with ``check``, a non-zero exit fails."""
    done = subprocess.run(
        [sys.executable, "-m", "dflashops.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"dflashops {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done
