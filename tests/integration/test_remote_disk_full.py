"""A full filesystem under a put (issue 32, item 8): the error says the filesystem is full,
where (its mount point), how much is free and how much the upload needed, and that nothing
changed; after space is freed, the plain rerun of the put converges.

Each test mounts a small tmpfs (``/srv/small``) inside a fresh netns host's own mount
namespace: the mount goes away with the host, nothing of this machine is touched.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dflashops.errors import RemoteError
from dflashops.remote import (
    FileUpload,
    RemoteDiskFullError,
    SshConnection,
    files,
    get_bytes,
    put_atomic,
    put_files,
    sha256_remote,
)
from tests.support.ssh_hosts import HostFactory, connect_to

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]

SMALL = "/srv/small"
TARGET = f"{SMALL}/app.bin"
MIB = 1024 * 1024
SIZE = re.compile(r"\d+(\.\d+)? (bytes|KiB|MiB|GiB)")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def free_bytes(conn: SshConnection, directory: str) -> int:
    return int(conn.run(f"df -Pk {directory}").stdout.splitlines()[1].split()[3]) * 1024


def listing(conn: SshConnection, directory: str) -> list[str]:
    return sorted(conn.run(f"ls -A {directory}").stdout.split())


@pytest.fixture
def conn(netns_host_factory: HostFactory) -> Iterator[SshConnection]:
    """A fresh host with a 1 MiB tmpfs on /srv/small (in the host's mount namespace only)."""
    with connect_to(netns_host_factory()) as connection:
        connection.run(f"mkdir -p {SMALL} && mount -t tmpfs -o size=1m dfotest-small {SMALL}")
        yield connection


def assert_full(err: RemoteError, *, free: int, needed_at_least: int) -> RemoteDiskFullError:
    assert isinstance(err, RemoteDiskFullError), err.one_line()
    line = err.one_line()
    assert err.mount == SMALL and f" {SMALL}" in line, line
    assert "full" in line and "nothing changed" in line, line
    assert err.free == free and err.needed >= needed_at_least, (err.free, err.needed, line)
    assert len(SIZE.findall(line)) >= 2, line  # how much is needed and how much is free
    return err


def test_a_put_larger_than_the_free_space_fails_before_sending_and_a_rerun_converges(
    conn: SshConnection,
) -> None:
    put_atomic(conn, b"v1\n", TARGET)
    put_atomic(conn, b"other v1\n", "/srv/other/a.txt")
    free = free_bytes(conn, SMALL)
    big = random.Random(8).randbytes(2 * MIB)
    transaction = [FileUpload("/srv/other/a.txt", b"other v2\n"), FileUpload(TARGET, big)]

    with pytest.raises(RemoteError) as caught:
        put_files(conn, transaction)

    err = assert_full(caught.value, free=free, needed_at_least=len(big))
    assert err.paths == ["/srv/other/a.txt", TARGET]
    assert sha256_remote(conn, TARGET) == sha(b"v1\n")  # every target as before
    assert sha256_remote(conn, "/srv/other/a.txt") == sha(b"other v1\n")
    assert listing(conn, SMALL) == ["app.bin"]  # no temp, no backup
    assert listing(conn, "/srv/other") == ["a.txt"]
    assert free_bytes(conn, SMALL) == free  # nothing was written

    conn.run(f"mount -o remount,size=4m {SMALL}")  # the operator makes room
    results = put_files(conn, transaction)
    assert [r.changed for r in results] == [True, True]
    assert get_bytes(conn, TARGET) == big
    assert put_files(conn, transaction)[1].changed is False  # converged


def test_a_disk_filled_by_another_writer_mid_upload_is_reported_full_and_a_rerun_converges(
    conn: SshConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The free space is checked before the upload; another writer fills the disk between
    that check and the upload, which then runs into ENOSPC half-way."""
    conn.run(f"mount -o remount,size=4m {SMALL}")
    put_atomic(conn, b"v1\n", TARGET)
    data = random.Random(9).randbytes(2 * MIB)
    upload = files._upload

    def fill_then_upload(*args: Any, **kwargs: Any) -> None:
        # leave 1 MiB: the 2 MiB upload stops half-way
        fill_kib = (free_bytes(conn, SMALL) - MIB) // 1024
        conn.run(f"dd if=/dev/zero of={SMALL}/filler bs=1k count={fill_kib} 2>/dev/null")
        upload(*args, **kwargs)

    monkeypatch.setattr(files, "_upload", fill_then_upload)
    with pytest.raises(RemoteError) as caught:
        put_atomic(conn, data, TARGET)
    monkeypatch.undo()

    free = free_bytes(conn, SMALL)
    assert free == MIB  # the half-written temp is gone
    assert_full(caught.value, free=free, needed_at_least=len(data))
    assert sha256_remote(conn, TARGET) == sha(b"v1\n")
    assert listing(conn, SMALL) == ["app.bin", "filler"]

    conn.run(f"rm -f {SMALL}/filler")  # the other writer's file goes away
    result = put_atomic(conn, data, TARGET)
    assert result.changed and get_bytes(conn, TARGET) == data
    assert not put_atomic(conn, data, TARGET).changed  # converged
