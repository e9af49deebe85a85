"""The OpenSSH server behind every lab host: the ``sshd`` binary, a host's key files and
``known_hosts``, its ``sshd_config``, and spawning sshd (in a host's namespaces or on loopback)
until it answers with its banner.

A host's files live in its own folder (``hostdir``): host key, client key (unless shared),
``authorized_keys``, ``known_hosts`` holding the host key (so clients verify it), ``sshd_config``
and ``sshd.log``. Which host to start where is :mod:`dflashops.lab.hosts`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from dflashops.errors import tail_lines
from dflashops.lab.errors import LabError
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.local_commands import run_command
from dflashops.lab.netns import flush_neighbours, kill_processes

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd")


def sshd_path() -> str | None:
    """The OpenSSH server binary, or None when openssh-server is not installed."""
    for candidate in SSHD_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("sshd")


def _require_sshd() -> str:
    sshd = sshd_path()
    if sshd is None:
        raise LabError("sshd not found", hint="apt-get install openssh-server")
    return sshd


# --------------------------------------------------------------------------- host files


def prepare_host_files(
    hostdir: Path, *, address: str, port: int, client_key: Path | None
) -> tuple[Path, Path]:
    """Host key, client key, authorized_keys and a known_hosts holding the host key.

    Keys already in ``hostdir`` are kept; ``client_key`` shares one client key between hosts (its
    ``.pub`` must exist). Returns the client key and the known_hosts file.
    """
    hostdir.mkdir(parents=True, exist_ok=True)
    host_key = hostdir / "ssh_host_ed25519_key"
    if not host_key.exists():
        _keygen(host_key, comment=f"host {hostdir.name}")
    if client_key is None:
        client_key = hostdir / "client_ed25519_key"
        if not client_key.exists():
            _keygen(client_key, comment=f"client {hostdir.name}")
    public = Path(f"{client_key}.pub").read_text()
    authorized = hostdir / "authorized_keys"
    authorized.write_text(public)
    authorized.chmod(0o600)
    key_type, key_b64 = Path(f"{host_key}.pub").read_text().split()[:2]
    known_hosts = hostdir / "known_hosts"
    known_hosts.write_text(f"{known_hosts_name(address, port)} {key_type} {key_b64}\n")
    return client_key, known_hosts


def known_hosts_name(address: str, port: int) -> str:
    """How OpenSSH and paramiko name a host in known_hosts (``[addr]:port`` off port 22)."""
    return address if port == 22 else f"[{address}]:{port}"


def write_sshd_config(
    hostdir: Path, *, address: str, port: int, session_env: Mapping[str, str] | None = None
) -> None:
    """Write ``hostdir/sshd_config``: key login only, files from ``hostdir``, verbose log.

    ``session_env``: variables every session gets (``SetEnv``). sshd builds a session's
    environment from scratch, so a host standing in for a container whose own profile would set
    them (a GPU machine's driver libraries and CUDA tools) passes them this way."""
    lines = [
        f"Port {port}",
        f"ListenAddress {address}",
        f"HostKey {hostdir / 'ssh_host_ed25519_key'}",
        "PidFile none",
        f"AuthorizedKeysFile {hostdir / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        # many short parallel sessions from tests; the default MaxStartups drops some
        "MaxStartups 100:30:200",
        "MaxSessions 50",
        # reap sessions of clients that vanished behind a cut link
        "ClientAliveInterval 5",
        "ClientAliveCountMax 3",
        "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE",
    ]
    if session_env:
        lines.append("SetEnv " + " ".join(_set_env_item(k, v) for k, v in session_env.items()))
    (hostdir / "sshd_config").write_text("\n".join(lines) + "\n")


def _set_env_item(name: str, value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or re.search(r'["\\\n\r]', value):
        raise LabError(
            f"cannot pass {name!r} through sshd's SetEnv (a bad name, or a quote, backslash or "
            "newline in its value)"
        )
    return f'"{name}={value}"'


def _keygen(path: Path, *, comment: str) -> None:
    run_command(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (another process may take it before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- spawning sshd


def spawn_netns_sshd(host: SshHost, ready_timeout: float) -> SshHost:
    """Start sshd in ``host``'s network namespace, inside a new UTS and mount namespace.

    The shell before sshd sets the host's hostname and makes its mounts; returns ``host`` with
    the new pid once sshd answers.
    """
    assert host.netns is not None
    sshd = _require_sshd()
    setup = [f"hostname {shlex.quote(host.hostname or host.name)}"]
    setup += _mount_commands(host.mounts, host.workdir / "ovl")
    setup += [
        "mkdir -p /run/sshd && chmod 0755 /run/sshd",
        f"exec {sshd} -D -e -f {shlex.quote(str(host.workdir / 'sshd_config'))}",
    ]
    argv = [
        "ip",
        "netns",
        "exec",
        host.netns,
        "unshare",
        "--uts",
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-ec",
        "\n".join(setup),
    ]
    flush_neighbours(host)
    # ip netns exec and unshare (without --fork) exec in place, so the child's pid is sshd's.
    process = _popen_logged(argv, host.log_file)
    started = replace(host, pid=process.pid, process=process)
    _wait_ready(started, ready_timeout)
    return started


def _mount_commands(mounts: Sequence[Mount], scratch: Path) -> list[str]:
    q = shlex.quote
    commands: list[str] = []
    if any(m.kind == "overlay" and m.source is None for m in mounts):
        commands.append(f"mkdir -p {q(str(scratch))} && mount -t tmpfs dfo-ovl {q(str(scratch))}")
    for index, mount in enumerate(mounts):
        target = q(mount.target)
        if mount.kind == "tmpfs":
            mode = q(f"mode={mount.mode}")
            commands.append(f"mkdir -p {target} && mount -t tmpfs -o {mode} dfo-tmp {target}")
        elif mount.kind == "bind":
            source = q(str(mount.source))
            commands.append(f"mkdir -p {target} && mount --bind {source} {target}")
            if mount.read_only:
                commands.append(f"mount -o remount,bind,ro {target}")
        else:
            base = mount.source if mount.source is not None else scratch / str(index)
            upper, work = q(str(base / "upper")), q(str(base / "work"))
            commands.append(
                f"mkdir -p {upper} {work} {target} && mount -t overlay dfo-ovl "
                f"-o lowerdir={target},upperdir={upper},workdir={work} {target}"
            )
    return commands


def spawn_loopback_sshd(host: SshHost, ready_timeout: float) -> SshHost:
    """Start sshd here for a loopback host; return ``host`` with the new pid once sshd answers."""
    sshd = _require_sshd()
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    argv = [sshd, "-D", "-e", "-f", str(host.workdir / "sshd_config")]
    process = _popen_logged(argv, host.log_file)
    started = replace(host, pid=process.pid, process=process)
    _wait_ready(started, ready_timeout)
    return started


def _popen_logged(argv: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("ab") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True
        )


def _wait_ready(host: SshHost, timeout: float) -> None:
    """Wait until sshd sends its banner; fail with sshd's log tail if it exits or never answers."""
    deadline = time.monotonic() + timeout
    while True:
        if host.process is not None and host.process.poll() is not None:
            raise LabError(
                f"sshd for {host.name} exited {host.process.returncode}: {_log_tail(host)}"
            )
        try:
            with socket.create_connection((host.address, host.port), timeout=0.5) as sock:
                sock.settimeout(1.0)
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            kill_processes(host)
            raise LabError(
                f"sshd for {host.name} not answering on {host.address}:{host.port} after "
                f"{timeout:.0f} s: {_log_tail(host)}"
            )
        time.sleep(0.02)


def _log_tail(host: SshHost) -> str:
    try:
        return tail_lines(host.log_file.read_text(errors="replace"), 5) or "(no output)"
    except OSError:
        return "(no log)"
