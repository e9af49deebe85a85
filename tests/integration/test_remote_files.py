"""Atomic puts on real sshd hosts: unchanged skipped, backups, transactions, faults mid-put."""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.errors import RemoteError
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.host_network import HostNetwork
from dflashops.lab.hosts import host_exec
from dflashops.remote import (
    BACKUPS_KEPT,
    FileUpload,
    RemoteTransferError,
    SshConnection,
    get_bytes,
    get_text,
    put_atomic,
    put_files,
    sha256_remote,
)
from tests.support.faults import clear_rate_limit, cut_link, kill_host, limit_rate, restore_link
from tests.support.ssh_hosts import HostFactory, connect_to

pytestmark = [pytest.mark.root, pytest.mark.timeout(150)]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def remote_ls(conn: SshConnection, directory: str) -> list[str]:
    return sorted(conn.run(f"ls -A {directory}").stdout.split())


@pytest.fixture
def conn(netns_hosts: list[SshHost]) -> SshConnection:
    connection = connect_to(netns_hosts[0])
    connection.run("rm -rf /srv/files")
    return connection


def test_put_creates_file_with_mode_and_parents(conn: SshConnection) -> None:
    result = put_atomic(conn, b"secret=1\n", "/srv/files/deep/er/app.env", 0o600)
    assert (result.changed, result.created, result.bytes_sent, result.backup) == (
        True,
        True,
        9,
        None,
    )
    assert result.sha256 == sha(b"secret=1\n")
    assert conn.run("stat -c %a /srv/files/deep/er/app.env").stdout.strip() == "600"
    assert get_text(conn, "/srv/files/deep/er/app.env") == "secret=1\n"
    assert sha256_remote(conn, "/srv/files/deep/er/app.env") == result.sha256
    assert sha256_remote(conn, "/srv/files/absent") is None
    assert remote_ls(conn, "/srv/files/deep/er") == ["app.env"]  # no temp left behind


def test_put_from_a_local_file(conn: SshConnection, tmp_path: Path) -> None:
    local = tmp_path / "blob.bin"
    local.write_bytes(random.Random(7).randbytes(700_000))  # several SFTP chunks
    result = put_atomic(conn, local, "/srv/files/blob.bin")
    assert result.bytes_sent == 700_000
    assert get_bytes(conn, "/srv/files/blob.bin") == local.read_bytes()


def test_unchanged_file_is_not_sent_again(netns_host_factory: HostFactory, tmp_path: Path) -> None:
    host = netns_host_factory()
    payload = random.Random(1).randbytes(1_000_000)
    with connect_to(host) as conn:
        first = put_atomic(conn, payload, "/srv/big.bin")
        before = conn.run("stat -c '%i %Y' /srv/big.bin").stdout
        # at 64 kbit/s sending 1 MB again would take two minutes
        limit_rate(host, "64kbit", burst="16kbit")
        started = time.monotonic()
        again = put_atomic(conn, payload, "/srv/big.bin", deadline=10)
        elapsed = time.monotonic() - started
        assert first.changed and not again.changed and again.bytes_sent == 0
        assert elapsed < 3
        assert conn.run("stat -c '%i %Y' /srv/big.bin").stdout == before
        assert remote_ls(conn, "/srv") == ["big.bin"]  # no backup either
        clear_rate_limit(host)


def test_same_content_new_mode_only_changes_the_mode(conn: SshConnection) -> None:
    put_atomic(conn, b"x", "/srv/files/m", 0o644)
    result = put_atomic(conn, b"x", "/srv/files/m", 0o640)
    assert result.changed and result.bytes_sent == 0
    assert conn.run("stat -c %a /srv/files/m").stdout.strip() == "640"


def test_replaced_versions_are_kept_as_timestamped_backups_last_five(conn: SshConnection) -> None:
    path = "/srv/files/conf.json"
    results = [put_atomic(conn, f"v{i}\n".encode(), path) for i in range(8)]
    assert results[0].backup is None
    backups = [r.backup for r in results[1:]]
    assert all(b and b.startswith(path + ".") and b.endswith("Z.bak") for b in backups)
    listing = remote_ls(conn, "/srv/files")
    kept = [name for name in listing if name.endswith(".bak")]
    assert len(kept) == BACKUPS_KEPT
    assert listing == sorted(["conf.json", *kept])
    # the newest five replaced versions: v2..v6 (v7 is current)
    assert [get_text(conn, f"/srv/files/{name}") for name in kept] == [
        f"v{i}\n" for i in range(2, 7)
    ]
    assert get_text(conn, path) == "v7\n"


def test_transaction_puts_all_files_or_none(conn: SshConnection) -> None:
    put_atomic(conn, b"old a\n", "/srv/files/a")
    results = put_files(
        conn,
        [
            FileUpload("/srv/files/a", b"new a\n"),
            FileUpload("/srv/files/sub/b", b"new b\n", 0o600),
        ],
    )
    assert [(r.changed, r.created) for r in results] == [(True, False), (True, True)]
    assert get_text(conn, "/srv/files/a") == "new a\n"
    assert get_text(conn, "/srv/files/sub/b") == "new b\n"
    unchanged = put_files(conn, [FileUpload("/srv/files/a", b"new a\n")])
    assert not unchanged[0].changed


def test_failed_rename_restores_every_file(conn: SshConnection, netns_hosts: list[SshHost]) -> None:
    put_atomic(conn, b"old a\n", "/srv/files/a")
    put_atomic(conn, b"old c\n", "/srv/files/c")
    # /srv/files/c becomes a mount point: renaming over it fails (EBUSY), after a and b
    # were already renamed into place
    conn.run("echo pinned > /srv/pin && mount --bind /srv/pin /srv/files/c")
    try:
        with pytest.raises(RemoteTransferError) as caught:
            put_files(
                conn,
                [
                    FileUpload("/srv/files/a", b"new a\n"),
                    FileUpload("/srv/files/b", b"new b\n"),
                    FileUpload("/srv/files/c", b"new c\n"),
                ],
            )
    finally:
        conn.run("umount /srv/files/c")
    assert "/srv/files/c" in caught.value.message and "restored" in caught.value.message
    assert get_text(conn, "/srv/files/a") == "old a\n"
    assert get_text(conn, "/srv/files/c") == "old c\n"
    assert sha256_remote(conn, "/srv/files/b") is None  # created, then removed again
    listing = remote_ls(conn, "/srv/files")
    assert [name for name in listing if ".dfo-" in name] == []  # temps discarded
    assert listing == ["a", "c"]  # and the backups the failed commit made are gone


def test_target_that_is_not_a_file_is_refused_before_anything_moves(
    conn: SshConnection,
) -> None:
    put_atomic(conn, b"keep\n", "/srv/files/a")
    conn.run("mkdir -p /srv/files/dir")
    with pytest.raises(RemoteTransferError) as caught:
        put_files(conn, [FileUpload("/srv/files/a", b"x"), FileUpload("/srv/files/dir", b"y")])
    assert caught.value.paths == ["/srv/files/dir"]
    assert get_text(conn, "/srv/files/a") == "keep\n"


def test_reading_a_missing_file_names_it(conn: SshConnection) -> None:
    with pytest.raises(RemoteError) as caught:
        get_text(conn, "/srv/files/nope")
    assert "/srv/files/nope" in caught.value.message


# ------------------------------------------------------------------ faults in the middle of a put

ROUNDS = 20
PAYLOAD_BYTES = 160 * 1024  # ~0.65 s at 2 mbit/s: a put takes ~0.9 s
RATE = "2mbit"
DEADLINE_S = 2.0


class CommitWatch(logging.Handler):
    """Notices the moment a put starts its commit step (the rename script)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.started = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "$ commit " in record.getMessage():
            self.started.set()


@pytest.fixture
def commit_watch() -> Iterator[CommitWatch]:
    logger = logging.getLogger("dflashops.remote")
    watch, level = CommitWatch(), logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.INFO)
    try:
        yield watch
    finally:
        logger.removeHandler(watch)
        logger.setLevel(level)


def fault_schedule() -> list[tuple[bool, bool, float]]:
    """(crash?, at commit?, delay) per round: crashes and cuts alternate; 12 rounds strike at
    times spread over connect, probe and upload, 8 rounds 0-45 ms after the commit starts."""
    schedule = []
    timed = 0
    for round_ in range(ROUNDS):
        crash, at_commit = round_ % 2 == 1, round_ % 5 >= 3
        if at_commit:
            delay = 0.015 * (round_ // 5)
        else:
            delay = 0.05 + 0.8 * timed / 11
            timed += 1
        schedule.append((crash, at_commit, delay))
    return schedule


def test_put_interrupted_by_a_dead_host_or_a_cut_link_never_corrupts_the_target(
    ssh_network: HostNetwork,
    netns_host_factory: HostFactory,
    commit_watch: CommitWatch,
    tmp_path: Path,
) -> None:
    """Each round puts a new version through a slow link and kills the host or cuts the link
    part-way. The target must always be one complete version, never a mix or a fragment."""
    data = tmp_path / "srv"
    data.mkdir()
    # /srv is a directory of this machine, so files outlive a killed host's mount namespace
    host = netns_host_factory(mounts=[Mount.bind(data, "/srv", read_only=False), Mount("/root")])
    target = data / "payload.bin"
    rng = random.Random(2024)
    first = rng.randbytes(PAYLOAD_BYTES)
    with connect_to(host) as conn:
        put_atomic(conn, first, "/srv/payload.bin")
    versions = {sha(first): first}
    limit_rate(host, RATE, burst="32kbit", latency="400ms")
    interrupted = 0
    for round_, (crash, at_commit, delay) in enumerate(fault_schedule()):
        new = rng.randbytes(PAYLOAD_BYTES)
        versions[sha(new)] = new
        commit_watch.started.clear()

        def strike(
            victim: SshHost = host,
            crash: bool = crash,
            at_commit: bool = at_commit,
            delay: float = delay,
        ) -> None:
            if at_commit and not commit_watch.started.wait(3 * DEADLINE_S):
                return
            time.sleep(delay)
            (kill_host if crash else cut_link)(victim)

        fault = threading.Thread(target=strike)
        conn = connect_to(host, connect_attempts=1, deadline=DEADLINE_S)
        started = time.monotonic()
        fault.start()
        try:
            put_atomic(conn, new, "/srv/payload.bin", deadline=DEADLINE_S)
            completed = True
        except RemoteError:
            completed = False
            interrupted += 1
        finally:
            fault.join()
            conn.close()
        # probe, upload and commit each have the deadline; a fault ends the step it hits
        assert time.monotonic() - started < 3 * DEADLINE_S
        if crash:
            host = ssh_network.restart_host(host)
        else:
            restore_link(host)
        current = sha(target.read_bytes())
        assert current in versions, f"round {round_}: target is no complete version"
        if completed:
            assert current == sha(new)
        for backup in data.glob("payload.bin.*.bak"):
            assert sha(backup.read_bytes()) in versions, f"round {round_}: {backup.name} broken"
    assert interrupted >= ROUNDS // 2, "faults should land mid-put in most rounds"
    clear_rate_limit(host)
    final = rng.randbytes(1000)
    with connect_to(host) as conn:
        assert put_atomic(conn, final, "/srv/payload.bin").changed
    assert target.read_bytes() == final
    leftovers = sorted(p.name for p in data.iterdir() if not p.name.endswith(".bak"))
    assert leftovers == ["payload.bin"]  # temps of interrupted puts were cleaned up
    assert len(list(data.glob("payload.bin.*.bak"))) <= BACKUPS_KEPT


def test_file_operations_on_a_cut_link_fail_by_their_deadline(
    netns_host_factory: HostFactory,
) -> None:
    host = netns_host_factory()
    with connect_to(host) as conn:
        put_atomic(conn, b"before\n", "/srv/f")
        cut_link(host)
        try:
            for operation in (
                lambda: put_atomic(conn, b"after\n", "/srv/f", deadline=1.0),
                lambda: get_text(conn, "/srv/f", deadline=1.0),
                lambda: sha256_remote(conn, "/srv/f", deadline=1.0),
            ):
                started = time.monotonic()
                with pytest.raises(RemoteError):
                    operation()
                assert time.monotonic() - started < 2.0
        finally:
            restore_link(host)
        assert host_exec(host, ["cat", "/srv/f"]).stdout == b"before\n"
