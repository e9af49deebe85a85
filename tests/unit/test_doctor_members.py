"""doctor's cross-node checks on a placement member, over recorded member outputs (what
``member_script`` prints on each member: pid, the process's interface variables, host name and
what it resolves to, ``ip -o addr``), and the script itself run here with ``sh``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from dflashops.deployment.layout import Layout
from dflashops.doctor.core import report_from
from dflashops.doctor.diagnose import diagnose
from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.link import LinkSample
from dflashops.doctor.members import (
    MemberNet,
    PlacementFacts,
    member_script,
    parse_member,
)
from dflashops.doctor.rules_members import members_alive, nccl_matches

HEAD = {"name": "lab-ct1", "rank": 0, "role": "head", "address": "10.77.0.11"}
WORKER = {"name": "lab-ct2", "rank": 1, "role": "worker", "address": "10.77.0.12"}


def recorded(
    address: str,
    *,
    pid: int | None = 4101,
    env: dict[str, str] | None = None,
    hostname: str = "ct",
    resolves: str | None = None,
    extra: str = "",
) -> str:
    """A member's output in the shape ``member_script`` prints it (``ip -o addr`` as iproute2
    writes it, a veth's ``@ifN`` suffix included)."""
    lines = []
    if pid is not None:
        lines.append(f"pid {pid}")
        lines += [f"env {k}={v}" for k, v in (env or {}).items()]
    lines.append(f"hostname {hostname}")
    if resolves:
        lines.append(f"resolves {resolves}      {hostname}")
    lines += [
        "addr 1: lo    inet 127.0.0.1/8 scope host lo\\       "
        "valid_lft forever preferred_lft forever",
        "addr 1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever",
        f"addr 2: eth0@if9    inet {address}/24 brd 10.77.0.255 scope global eth0\\       "
        "valid_lft forever preferred_lft forever",
    ]
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def facts(*members: MemberNet, device: str = "cpu") -> DoctorFacts:
    return DoctorFacts(
        container="lab-ct1",
        device=device,
        placement=PlacementFacts(playbook="lab-multinode", members=members),
    )


MEMBER_RULES = ("members", "member-network", "member-throughput")


def checks(result: DoctorFacts) -> dict[str, Any]:
    """The member rules' findings and outcomes (the single-container rules judge the head's
    own server; these facts give them nothing to read)."""
    findings, done = diagnose(result)
    return {
        "findings": [f for f in findings if f.rule in MEMBER_RULES],
        "checks": {c.rule: c for c in done},
    }


def healthy(entry: dict[str, Any], **options: Any) -> MemberNet:
    return parse_member(
        recorded(entry["address"], resolves=entry["address"], hostname=entry["name"], **options),
        entry,
    )


def test_parse_reads_process_env_interfaces_and_host_name() -> None:
    m = parse_member(
        recorded(
            "10.77.0.12",
            env={"GLOO_SOCKET_IFNAME": "eth0", "VLLM_HOST_IP": "10.77.0.12"},
            hostname="lab-ct2",
            resolves="10.77.0.12",
        ),
        WORKER,
    )
    assert m.running and m.reachable
    assert m.env == {"GLOO_SOCKET_IFNAME": "eth0", "VLLM_HOST_IP": "10.77.0.12"}
    assert m.interfaces == {"lo": ("127.0.0.1", "::1"), "eth0": ("10.77.0.12",)}
    assert m.interface_of("10.77.0.12") == "eth0"
    assert (m.hostname, m.hostname_address) == ("lab-ct2", "10.77.0.12")


def test_a_healthy_pair_passes_every_member_check() -> None:
    got = checks(facts(healthy(HEAD), healthy(WORKER)))
    assert got["findings"] == []
    assert got["checks"]["members"].outcome == "ok"
    network = got["checks"]["member-network"]
    assert network.outcome == "ok" and "lab-ct1 eth0, lab-ct2 eth0" in network.note
    throughput = got["checks"]["member-throughput"]
    assert throughput.outcome == "skipped"
    assert throughput.note == "no other member could be reached to measure the link to it"


def test_a_dead_worker_is_a_critical_finding_naming_it() -> None:
    dead = parse_member(recorded("10.77.0.12", pid=None, resolves="10.77.0.12"), WORKER)
    (finding,) = [f for f in checks(facts(healthy(HEAD), dead))["findings"] if f.rule == "members"]
    assert finding.severity == "critical"
    assert finding.title == "placement lab-multinode is degraded: lab-ct2 not running"
    assert finding.evidence == (
        "lab-ct2 (worker, rank 1, 10.77.0.12): no server process (pidfile names no live process)",
    )
    assert (
        finding.fix == "dflashops logs lab-ct2; then relaunch the group: dflashops launch lab-ct1"
    )


def test_an_unreachable_member_is_named_with_the_ssh_error() -> None:
    gone = MemberNet(**WORKER, error="ssh 10.77.0.12:22: connection refused")  # type: ignore[arg-type]
    got = checks(facts(healthy(HEAD), gone))
    (finding,) = [f for f in got["findings"] if f.rule == "members"]
    assert "lab-ct2 unreachable" in finding.title
    assert finding.details == {"down": [], "unreachable": ["lab-ct2"]}
    # its network is not judged from nothing: only the head's is checked
    assert got["checks"]["member-network"].note.endswith("lab-ct1 eth0")


def test_gloo_on_another_interface_is_found() -> None:
    worker = parse_member(
        recorded(
            "10.77.0.12",
            env={"GLOO_SOCKET_IFNAME": "eth1"},
            resolves="10.77.0.12",
            extra="addr 3: eth1    inet 192.168.5.2/24 brd 192.168.5.255 scope global eth1",
        ),
        WORKER,
    )
    (finding,) = checks(facts(healthy(HEAD), worker))["findings"]
    assert finding.severity == "warning"
    assert finding.title == "lab-ct2: Gloo binds to eth1, not eth0 (which carries 10.77.0.12)"
    assert finding.fix.startswith("set server.env GLOO_SOCKET_IFNAME: eth0 in the playbook")
    # an interface the member does not have at all: nothing can bind, critical
    missing = parse_member(recorded("10.77.0.12", env={"GLOO_SOCKET_IFNAME": "ens5"}), WORKER)
    (finding,) = checks(facts(healthy(HEAD), missing))["findings"]
    assert finding.severity == "critical"


def test_a_host_name_on_loopback_sends_gloo_to_loopback() -> None:
    # what this machine's own /etc/hosts does (the host name on 127.0.x.1), the reason launch
    # writes the members' names into /etc/hosts
    worker = parse_member(recorded("10.77.0.12", hostname="lab-ct2", resolves="127.0.1.1"), WORKER)
    (finding,) = checks(facts(healthy(HEAD), worker))["findings"]
    assert (
        finding.title == "lab-ct2: Gloo binds where its host name lab-ct2 points, not to 10.77.0.12"
    )
    assert "host name lab-ct2 resolves to 127.0.1.1 (on no interface)" in finding.evidence
    unresolved = parse_member(recorded("10.77.0.12", hostname="lab-ct2"), WORKER)
    (finding,) = checks(facts(healthy(HEAD), unresolved))["findings"]
    assert "does not resolve (torch falls back to the loopback address)" in finding.evidence[1]


def test_nccl_interface_rules_on_gpu_members() -> None:
    assert nccl_matches("eth", "eth0") and nccl_matches("=eth0", "eth0")
    assert not nccl_matches("=eth", "eth0") and not nccl_matches("^eth", "eth0")
    assert nccl_matches("ib,eth", "eth0") and nccl_matches("^docker,lo", "eth0")
    wrong = healthy(WORKER, env={"NCCL_SOCKET_IFNAME": "ib"})
    (finding,) = checks(facts(healthy(HEAD), wrong, device="cuda"))["findings"]
    assert (
        finding.title == "lab-ct2: NCCL_SOCKET_IFNAME=ib excludes eth0 (which carries 10.77.0.12)"
    )
    two = healthy(
        WORKER, extra="addr 3: ib0    inet 192.168.9.2/24 brd 192.168.9.255 scope global ib0"
    )
    (finding,) = checks(facts(healthy(HEAD), two, device="cuda"))["findings"]
    assert finding.severity == "info" and "NCCL chooses among 2 interfaces" in finding.title
    # on the CPU build only Gloo talks: NCCL's variable is not judged
    assert checks(facts(healthy(HEAD), wrong))["findings"] == []


def test_a_single_container_lists_no_cross_node_checks() -> None:
    got = checks(DoctorFacts(container="ct", device="cpu"))
    assert got["findings"] == []
    assert not set(MEMBER_RULES) & set(got["checks"])
    # the rules themselves say why, if called on such facts
    assert members_alive(DoctorFacts(container="ct")).skipped == "not a member of a placement"


def test_the_member_script_runs_and_parses_here(tmp_path: Path) -> None:
    layout = Layout(etc=str(tmp_path / "etc"), state=str(tmp_path / "state"))
    done = subprocess.run(
        ["sh", "-c", member_script(layout)], capture_output=True, text=True, timeout=30, check=True
    )
    m = parse_member(done.stdout, HEAD)
    assert not m.running  # no pidfile in the temp layout
    assert m.interfaces.get("lo") and "127.0.0.1" in m.interfaces["lo"]
    assert m.hostname


def test_the_report_measures_every_member() -> None:
    gone = MemberNet(**WORKER, error="refused")  # type: ignore[arg-type]
    report = report_from(facts(healthy(HEAD, env={"VLLM_HOST_IP": "10.77.0.11"}), gone))
    assert report.measured["members"] == [
        {
            "name": "lab-ct1",
            "role": "head",
            "rank": 0,
            "address": "10.77.0.11",
            "reachable": True,
            "running": True,
            "interface": "eth0",
            "env": {"VLLM_HOST_IP": "10.77.0.11"},
        },
        {
            "name": "lab-ct2",
            "role": "worker",
            "rank": 1,
            "address": "10.77.0.12",
            "reachable": False,
            "running": None,
            "interface": None,
            "env": {},
        },
    ]
    assert report.exit_code == 1  # the unreachable member is a critical finding


def with_links(*links: LinkSample, device: str = "cpu") -> DoctorFacts:
    result = facts(healthy(HEAD), healthy(WORKER), device=device)
    assert result.placement is not None
    return DoctorFacts(
        container=result.container,
        device=device,
        placement=PlacementFacts(
            playbook=result.placement.playbook, members=result.placement.members, links=links
        ),
    )


def test_a_measured_link_is_reported() -> None:
    fast = LinkSample("lab-ct1", "lab-ct2", nbytes=64 << 20, seconds=0.05)
    got = checks(with_links(fast, device="cuda"))
    assert got["findings"] == []
    note = got["checks"]["member-throughput"].note
    assert note == "lab-ct1 -> lab-ct2: 10.7 Gbit/s (64 MiB in 0.050 s)"


def test_a_slow_link_warns_on_gpus_only() -> None:
    slow = LinkSample("lab-ct1", "lab-ct2", nbytes=64 << 20, seconds=0.6)  # 0.9 Gbit/s
    (finding,) = checks(with_links(slow, device="cuda"))["findings"]
    assert finding.severity == "warning" and "0.9 Gbit/s" in finding.title
    assert checks(with_links(slow, device="cpu"))["findings"] == []


def test_a_failed_transfer_names_the_link() -> None:
    failed = LinkSample("lab-ct1", "lab-ct2", error="no listener on lab-ct2 10.77.0.12")
    (finding,) = checks(with_links(failed))["findings"]
    assert finding.title == "link lab-ct1 -> lab-ct2 could not be measured"
    assert "TCP 1024-65535" in finding.fix
