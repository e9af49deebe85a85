"""Remote layer pieces that need no SSH server: deadlines, groups, scripts, host-key policies."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from dflashops.errors import RemoteCommandError
from dflashops.inventory.models import SshAccess
from dflashops.remote import (
    FileUpload,
    GroupError,
    GroupResult,
    HostKeyError,
    HostOutcome,
    RemoteDeadlineError,
    SshConnection,
    for_each_host,
    put_files,
)
from dflashops.remote.files import _prune_backups, _temp_prefix
from dflashops.remote.host_keys import RecordNewKey as _RecordNewKey
from dflashops.remote.host_keys import RejectUnknownKey as _RejectUnknownKey

pytestmark = pytest.mark.timeout(60)


def idle_connection(name: str) -> SshConnection:
    """A connection object that is never opened (nothing here touches the network)."""
    return SshConnection("127.0.0.1", port=2, name=name)


def test_call_returns_value_and_reraises_errors_in_the_callers_thread() -> None:
    conn = idle_connection("h")
    assert conn.call("sum", lambda: 1 + 1, 5) == 2
    with pytest.raises(ZeroDivisionError):
        conn.call("divide", lambda: 1 // 0, 5)


def test_call_past_its_deadline_unblocks_and_raises() -> None:
    conn = idle_connection("h")
    release = threading.Event()
    reacted = threading.Event()

    def on_timeout() -> None:
        reacted.set()
        release.set()  # what closing the transport does to a blocked read

    started = time.monotonic()
    with pytest.raises(RemoteDeadlineError) as caught:
        conn.call("stuck read", lambda: release.wait(30), 0.3, on_timeout=on_timeout)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert reacted.is_set()
    error = caught.value
    assert (error.host, error.operation, error.deadline_s) == ("h", "stuck read", 0.3)
    assert error.one_line().startswith("h: stuck read: deadline exceeded (0.3 s)")


def test_call_never_waits_for_a_worker_that_ignores_the_abort() -> None:
    conn = idle_connection("h")
    started = time.monotonic()
    with pytest.raises(RemoteDeadlineError):
        conn.call("hung", lambda: time.sleep(5), 0.2, on_timeout=lambda: None)
    assert time.monotonic() - started < 1.5


def test_connection_from_inventory_access_and_overrides(tmp_path: Path) -> None:
    access = SshAccess(host="10.200.1.5", port=2222, user="ops", known_hosts=tmp_path / "kh")
    conn = SshConnection.from_access(access, deadline=3, user="root")
    assert (conn.host, conn.port, conn.user, conn.deadline) == ("10.200.1.5", 2222, "root", 3)
    assert conn.known_hosts == tmp_path / "kh" and not conn.accept_new_host_key
    assert conn.name == "10.200.1.5:2222"
    assert SshConnection.from_access(access, host="10.200.1.6").host == "10.200.1.6"


def test_group_result_splits_and_summarises() -> None:
    result: GroupResult[int] = GroupResult(
        (
            HostOutcome("a", value=1),
            HostOutcome(
                "b", error=RemoteCommandError(host="b", command="false", exit_code=1, stderr="no")
            ),
            HostOutcome("c", value=3),
        )
    )
    assert result.succeeded == {"a": 1, "c": 3}
    assert list(result.failed) == ["b"]
    assert not result.ok
    assert result.summary() == "2 of 3 hosts succeeded; failed: b: b: `false` exited 1: no"
    with pytest.raises(GroupError) as caught:
        result.raise_if_failed()
    assert list(caught.value.failed) == ["b"]


def test_for_each_host_keeps_every_outcome_and_runs_in_parallel() -> None:
    connections = [idle_connection(n) for n in ("a", "b", "c", "d")]

    def operation(conn: SshConnection) -> str:
        time.sleep(0.3)
        if conn.name == "c":
            raise ValueError("boom")
        return conn.name.upper()

    started = time.monotonic()
    result = for_each_host(connections, operation)
    assert time.monotonic() - started < 0.9
    assert result.succeeded == {"a": "A", "b": "B", "d": "D"}
    assert isinstance(result.failed["c"], ValueError)
    assert [o.host for o in result.outcomes] == ["a", "b", "c", "d"]


def test_for_each_host_refuses_duplicate_names() -> None:
    with pytest.raises(ValueError, match="twice"):
        for_each_host([idle_connection("a"), idle_connection("a")], lambda c: None)
    assert for_each_host([], lambda c: None).ok


def test_put_files_validates_paths_before_connecting() -> None:
    conn = idle_connection("h")
    with pytest.raises(ValueError, match="absolute"):
        put_files(conn, [FileUpload("relative/path", b"")])
    with pytest.raises(ValueError, match="duplicate"):
        put_files(conn, [FileUpload("/a", b""), FileUpload("/a", b"x")])
    assert not conn.is_open


def test_prune_keeps_the_newest_backups_only(tmp_path: Path) -> None:
    target = tmp_path / "with space" / "conf.json"
    target.parent.mkdir()
    target.write_text("current")
    stamps = [f"2026010{d}T120000.00000{d}Z" for d in range(1, 9)]
    for stamp in stamps:
        Path(f"{target}.{stamp}.bak").write_text(stamp)
    unrelated = [target.parent / "conf.json.bak", target.parent / "conf.json.old.bak"]
    for path in unrelated:
        path.write_text("keep")
    subprocess.run(["sh", "-c", _prune_backups(str(target))], check=True, timeout=10)
    kept = sorted(p.name for p in target.parent.glob("conf.json.2026*.bak"))
    assert kept == [f"conf.json.{stamp}.bak" for stamp in stamps[-5:]]
    assert all(path.exists() for path in unrelated) and target.exists()


def test_temp_files_are_hidden_siblings() -> None:
    assert _temp_prefix("/etc/dflashops/server.json") == "/etc/dflashops/.server.json.dfo-"


def test_unknown_key_is_rejected_and_nothing_written(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    client = paramiko.SSHClient()
    with pytest.raises(HostKeyError) as caught:
        _RejectUnknownKey(known, "h").missing_host_key(client, "[10.200.1.9]:2222", key)
    assert key.fingerprint in caught.value.message
    assert not known.exists()


def test_new_key_is_recorded_in_a_private_file(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "ssh" / "known_hosts"
    client = paramiko.SSHClient()
    _RecordNewKey(known, "h").missing_host_key(client, "[10.200.1.9]:2222", key)
    assert known.stat().st_mode & 0o777 == 0o600
    assert known.parent.stat().st_mode & 0o777 == 0o700
    loaded = paramiko.HostKeys(str(known))
    assert loaded.lookup("[10.200.1.9]:2222")[key.get_name()] == key
    assert client.get_host_keys().lookup("[10.200.1.9]:2222") is not None
