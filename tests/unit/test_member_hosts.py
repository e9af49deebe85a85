"""The members' block in ``/etc/hosts`` (issue 24): merged without touching other lines,
idempotent, refused for values a hosts file cannot hold, and written through a real shell with
hostile paths and file contents (the harness of test_remote_commands_hostile.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.errors import PlaybookError
from dflashops.launch.member_hosts import BEGIN, END, merge_hosts, write_member_hosts
from dflashops.launch.placement import Member
from tests.support.shell_argv import PAYLOADS, SandboxConnection, ShellSandbox, assert_safe

PVE_HOSTS = (
    "127.0.0.1 localhost\n"
    "::1 localhost ip6-localhost\n"
    "# --- BEGIN PVE ---\n"
    "10.0.0.11 ct1.lan ct1\n"
    "# --- END PVE ---\n"
)
GROUP = [Member("ct1", 0, "10.0.0.11", 1), Member("ct2", 1, "10.0.0.12", 1)]


def test_the_block_is_appended_and_every_other_line_kept() -> None:
    merged = merge_hosts(PVE_HOSTS, GROUP)
    assert merged.startswith(PVE_HOSTS)
    assert merged[len(PVE_HOSTS) :].splitlines() == [
        BEGIN,
        "10.0.0.11 ct1",
        "10.0.0.12 ct2",
        END,
    ]
    assert merge_hosts(merged, GROUP) == merged  # a second launch changes nothing


def test_a_new_group_replaces_only_the_block() -> None:
    merged = merge_hosts(PVE_HOSTS + "10.9.9.9 mine # the operator's\n", GROUP)
    other = [Member("ct1", 0, "10.0.0.11", 1), Member("ct3", 1, "10.0.0.13", 1)]
    again = merge_hosts(merged, other)
    lines = again.splitlines()
    assert "10.9.9.9 mine # the operator's" in lines and "10.0.0.13 ct3" in lines
    assert "10.0.0.12 ct2" not in lines
    assert lines.count(BEGIN) == 1 and lines.count(END) == 1
    assert again.startswith(PVE_HOSTS)


def test_a_cut_short_block_is_replaced_to_the_end() -> None:
    broken = PVE_HOSTS + BEGIN + "\n10.0.0.11 ct1\n10.0.0."
    assert merge_hosts(broken, GROUP) == merge_hosts(PVE_HOSTS, GROUP)


def test_an_empty_or_missing_file_gets_just_the_block() -> None:
    assert merge_hosts("", GROUP).splitlines()[0] == BEGIN


@pytest.mark.parametrize("payload", PAYLOADS)
def test_values_a_hosts_file_cannot_hold_are_refused(payload: str) -> None:
    with pytest.raises(PlaybookError, match="/etc/hosts"):
        merge_hosts("", [Member(f"{payload}ct1", 0, "10.0.0.11", 1)])
    with pytest.raises(PlaybookError, match="is no IP"):
        merge_hosts("", [Member("ct1", 0, f"10.0.0.11{payload}", 1)])


@pytest.mark.parametrize("payload", PAYLOADS)
def test_write_through_a_shell_with_hostile_path_and_content(tmp_path: Path, payload: str) -> None:
    sandbox = ShellSandbox(tmp_path)
    conn = SandboxConnection(sandbox)
    folder = Path(f"{sandbox.root}/{payload.replace('/', '_')}")
    folder.mkdir(parents=True, exist_ok=True)
    hosts = folder / "hosts"
    # what the operator wrote may hold anything: it comes back byte for byte
    before = f"127.0.0.1 localhost\n# {payload}\n"
    hosts.write_text(before)
    assert write_member_hosts(conn, GROUP, path=str(hosts)) is True
    assert hosts.read_text() == merge_hosts(before, GROUP)
    assert write_member_hosts(conn, GROUP, path=str(hosts)) is False  # idempotent
    assert_safe(sandbox.calls)


def test_a_missing_file_is_created(tmp_path: Path) -> None:
    sandbox = ShellSandbox(tmp_path)
    hosts = Path(sandbox.root) / "hosts"
    assert write_member_hosts(SandboxConnection(sandbox), GROUP, path=str(hosts))
    assert hosts.read_text().splitlines()[1:3] == ["10.0.0.11 ct1", "10.0.0.12 ct2"]
