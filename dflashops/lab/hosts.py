"""Real OpenSSH "hosts" on this machine, for tests and the lab.

Two kinds, both a private ``sshd`` kept as a :class:`subprocess.Popen` child of the caller:

* **netns hosts** (root only): a network namespace joined to a bridge by a veth pair, with its
  own address, its own hostname (UTS namespace) and private directories (mount namespace: tmpfs,
  copy-on-write overlays or bind mounts over chosen paths), sshd listening on port 22. The veth
  (``SshHost.veth``) and the namespace are named, so a test can break the link from outside.
* **loopback hosts** (any user): sshd on ``127.0.0.1`` and a free port, sharing this machine's
  filesystem; the login user is the caller.

Every host gets its own host key, a client key (generated or shared) in ``authorized_keys``, and
a ``known_hosts`` file that already holds the host key, so clients verify host keys in tests.

Typical use (a pytest fixture, or the lab's PVE double creating a container)::

    with HostNetwork("dfotest0", "10.200.1.0/24", workdir) as net:
        h1 = net.start_host("dfotest-h1", mounts=[Mount.tmpfs("/srv")])
        h1.access()                      # SshAccess(host="10.200.1.10", ...)
        h1 = net.restart_host(h1)        # like a reboot
        net.stop_host(h1)

A container-like host for the lab: ``mounts=[Mount.overlay("/etc", upper=state / "etc"),
Mount.bind(state / "opt", "/opt", read_only=False), Mount.tmpfs("/root"), Mount.bind(venv,
venv_path)]`` gives it its own /etc and /opt (kept across :func:`restart_host`), an empty /root
and a read-only view of a venv. :func:`host_exec` runs a command inside a host without SSH.

Teardown is by name (namespace ``NAME``, root-side veth ``v-NAME``, bridge) and by PID; it is
idempotent, and starting a host or bridge first removes leftovers with the same name from a
crashed earlier run (:func:`remove_netns_hosts` sweeps a whole name prefix).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Literal

from dflashops.errors import LabError, tail_lines
from dflashops.inventory.models import SshAccess

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd")
# Interface names are at most 15 bytes; the root-side veth is "v-" + the host name.
HOST_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,12}$")
IFACE_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,14}$")
CMD_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 10.0

MountKind = Literal["tmpfs", "overlay", "bind"]


@dataclass(frozen=True)
class Mount:
    """One private mount a netns host sees over ``target`` (nobody else sees it).

    * ``tmpfs``: an empty, writable directory; gone when the host stops or restarts.
    * ``overlay``: ``target``'s current content, writable copy-on-write. Writes go to ``source``
      when given (they survive :func:`restart_host`), else to a tmpfs (lost on restart).
    * ``bind``: ``source`` from this machine, read-only unless ``read_only=False`` (models,
      venvs, or a persistent data directory).
    """

    target: str
    kind: MountKind = "tmpfs"
    source: Path | None = None
    read_only: bool = False

    @classmethod
    def tmpfs(cls, target: str) -> Mount:
        return cls(target, "tmpfs")

    @classmethod
    def overlay(cls, target: str, upper: Path | None = None) -> Mount:
        return cls(target, "overlay", upper)

    @classmethod
    def bind(cls, source: Path, target: str, *, read_only: bool = True) -> Mount:
        return cls(target, "bind", source, read_only)

    def __post_init__(self) -> None:
        if not self.target.startswith("/") or self.target == "/":
            raise LabError(f"mount target must be an absolute path below /, not {self.target!r}")
        if self.kind == "bind" and self.source is None:
            raise LabError(f"bind mount on {self.target} needs a source")


@dataclass(frozen=True)
class SshHost:
    """A running sshd host: everything a client needs, plus what teardown needs."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    pid: int
    workdir: Path
    netns: str | None = None
    veth: str | None = None
    hostname: str | None = None
    mounts: tuple[Mount, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def log_file(self) -> Path:
        """sshd's own log (``-e`` output, LogLevel VERBOSE)."""
        return self.workdir / "sshd.log"

    def access(self, *, accept_new_host_key: bool = False) -> SshAccess:
        """The inventory's view of this host (host keys verified against :attr:`known_hosts`)."""
        return SshAccess(
            host=self.address,
            port=self.port,
            user=self.user,
            key_file=self.key_file,
            known_hosts=self.known_hosts,
            accept_new_host_key=accept_new_host_key,
        )


# --------------------------------------------------------------------------- availability


def sshd_path() -> str | None:
    """The OpenSSH server binary, or None when openssh-server is not installed."""
    for candidate in SSHD_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("sshd")


def loopback_unavailable_reason() -> str | None:
    """Why loopback hosts cannot start here (None when they can)."""
    if sshd_path() is None:
        return "sshd not found (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not found (apt-get install openssh-client)"
    return None


def netns_unavailable_reason() -> str | None:
    """Why netns hosts cannot start here (None when they can): needs root, ip, unshare, nsenter."""
    reason = loopback_unavailable_reason()
    if reason:
        return reason
    if os.geteuid() != 0:
        return "netns hosts need root"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install iproute2 util-linux)"
    probe = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False
    )
    if probe.returncode != 0:
        return f"`ip netns` unavailable: {probe.stderr.strip()}"
    return None


# --------------------------------------------------------------------------- bridge


def ensure_bridge(name: str, cidr: str) -> str:
    """(Re)create bridge ``name`` with the network's first address; return that address.

    A bridge left over with the same name is deleted first (veths attached to it stay until
    their hosts are removed by name).
    """
    _check_iface(name)
    network = ipaddress.ip_network(cidr)
    gateway = next(network.hosts())
    remove_bridge(name)
    _ip("link", "add", name, "type", "bridge")
    _ip("addr", "add", f"{gateway}/{network.prefixlen}", "dev", name)
    _ip("link", "set", name, "up")
    return str(gateway)


def remove_bridge(name: str) -> None:
    """Delete bridge ``name`` if it exists (idempotent)."""
    _check_iface(name)
    if _link_exists(name):
        _ip("link", "del", name, check=False)


# --------------------------------------------------------------------------- netns hosts


def start_netns_host(
    name: str,
    *,
    bridge: str,
    address: str,
    workdir: Path,
    mounts: Sequence[Mount] = (Mount("/srv"),),
    hostname: str | None = None,
    client_key: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
) -> SshHost:
    """Start host ``name``: namespace ``name``, veth ``v-NAME`` on ``bridge``, sshd on port 22.

    ``address`` is ``IP/PREFIX`` inside the bridge's network (its first address is the gateway).
    Host files (keys, sshd_config, sshd.log, known_hosts) go to ``workdir/NAME``, which must stay
    visible: no mount may cover it. ``client_key`` shares one client key between hosts (its
    ``.pub`` must exist); otherwise one is generated. Leftovers named ``name`` are removed first.
    """
    _check_host_name(name)
    _check_iface(bridge)
    iface = ipaddress.ip_interface(address)
    hostdir = (workdir / name).resolve()
    _check_mounts(mounts, hostdir)
    remove_netns_host(name)
    veth = f"v-{name}"
    try:
        _ip("netns", "add", name)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("link", "set", veth, "master", bridge, "up")
        _ip("-n", name, "addr", "add", str(iface), "dev", "eth0")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "link", "set", "eth0", "up")
        gateway = next(iface.network.hosts())
        if gateway != iface.ip:
            _ip("-n", name, "route", "add", "default", "via", str(gateway))
        address_only = str(iface.ip)
        key_file, known_hosts = _prepare_host_files(
            hostdir, address=address_only, port=22, client_key=client_key
        )
        _write_sshd_config(hostdir, address=address_only, port=22)
        host = SshHost(
            name=name,
            address=address_only,
            port=22,
            user="root",
            key_file=key_file,
            known_hosts=known_hosts,
            pid=0,
            workdir=hostdir,
            netns=name,
            veth=veth,
            hostname=hostname or name,
            mounts=tuple(mounts),
        )
        return _spawn_netns_sshd(host, ready_timeout)
    except BaseException:
        remove_netns_host(name)
        raise


def restart_host(host: SshHost, *, ready_timeout: float = READY_TIMEOUT_S) -> SshHost:
    """Kill everything on ``host`` and start its sshd again, like a reboot.

    The address, keys and known_hosts stay. For a netns host the mount namespace is new: tmpfs
    mounts come back empty, bind mounts and overlays with an upper directory keep their files.
    """
    kill_processes(host)
    if host.netns is None:
        return _spawn_loopback_sshd(host, ready_timeout)
    return _spawn_netns_sshd(host, ready_timeout)


def remove_netns_host(name: str) -> None:
    """Tear down host ``name`` by name: kill its processes, delete namespace and veth (idempotent).

    Works on leftovers of a crashed run, whose processes are no children of ours.
    """
    _check_host_name(name)
    if _netns_exists(name):
        _kill_netns_pids(name)
        _ip("netns", "del", name, check=False)
    veth = f"v-{name}"
    if _link_exists(veth):
        _ip("link", "del", veth, check=False)


def remove_netns_hosts(prefix: str) -> list[str]:
    """Tear down every netns host whose name starts with ``prefix`` (leftovers of a crashed run).

    Returns the names removed.
    """
    if not prefix:
        raise LabError("give a name prefix: removing every namespace is never wanted")
    listing = run_command(["ip", "netns", "list"], check=False).stdout.decode()
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    removed = [name for name in names if name.startswith(prefix) and HOST_NAME_RE.match(name)]
    for name in removed:
        remove_netns_host(name)
    return removed


def _spawn_netns_sshd(host: SshHost, ready_timeout: float) -> SshHost:
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
            commands.append(f"mkdir -p {target} && mount -t tmpfs -o mode=0755 dfo-tmp {target}")
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


# --------------------------------------------------------------------------- loopback hosts


def start_loopback_host(
    name: str,
    *,
    workdir: Path,
    client_key: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
) -> SshHost:
    """Start sshd on 127.0.0.1 and a free port; log in as the calling user (root not needed).

    Files go to ``workdir/NAME``. The host shares this machine's filesystem and network (no
    link of its own to cut or slow).
    """
    _check_host_name(name)
    hostdir = (workdir / name).resolve()
    user = pwd.getpwuid(os.geteuid()).pw_name
    last_error: LabError | None = None
    for _ in range(3):  # a free port can be taken between our probe and sshd's bind
        port = _free_port()
        key_file, known_hosts = _prepare_host_files(
            hostdir, address="127.0.0.1", port=port, client_key=client_key
        )
        _write_sshd_config(hostdir, address="127.0.0.1", port=port)
        host = SshHost(
            name=name,
            address="127.0.0.1",
            port=port,
            user=user,
            key_file=key_file,
            known_hosts=known_hosts,
            pid=0,
            workdir=hostdir,
        )
        try:
            return _spawn_loopback_sshd(host, ready_timeout)
        except LabError as exc:
            last_error = exc
    assert last_error is not None
    raise last_error


def _spawn_loopback_sshd(host: SshHost, ready_timeout: float) -> SshHost:
    sshd = _require_sshd()
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    argv = [sshd, "-D", "-e", "-f", str(host.workdir / "sshd_config")]
    process = _popen_logged(argv, host.log_file)
    started = replace(host, pid=process.pid, process=process)
    _wait_ready(started, ready_timeout)
    return started


# --------------------------------------------------------------------------- lifecycle


def stop_host(host: SshHost) -> None:
    """Stop ``host`` and remove its namespace and veth (idempotent). Keeps ``host.workdir``."""
    kill_processes(host)
    if host.netns is not None:
        remove_netns_host(host.netns)


def host_alive(host: SshHost) -> bool:
    """Whether ``host``'s sshd still runs (and its namespace still exists)."""
    if host.netns is not None and not _netns_exists(host.netns):
        return False
    if host.process is not None:
        return host.process.poll() is None  # a dead child of ours lingers as a zombie in /proc
    return Path(f"/proc/{host.pid}").exists()


def kill_processes(host: SshHost) -> None:
    """SIGKILL sshd and every process started on ``host`` (idempotent).

    A netns host keeps its namespace and link, so new connections are refused at once; what
    follows decides whether it stops (:func:`stop_host`) or comes back (:func:`restart_host`).
    """
    if host.netns is not None:
        if _netns_exists(host.netns):
            _kill_netns_pids(host.netns)
    else:
        for pid in [*_descendants(host.pid), host.pid]:
            _kill(pid)
    if host.process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            host.process.wait(timeout=CMD_TIMEOUT_S)


def host_exec(
    host: SshHost,
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    timeout: float = CMD_TIMEOUT_S,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` inside ``host`` (its mounts, hostname and network) without SSH.

    Works while the link is cut, so tests can look at a host's files behind a partition.
    A loopback host shares this machine, so ``argv`` simply runs here.
    """
    prefix: list[str] = []
    if host.netns is not None:
        prefix = ["nsenter", "-t", str(host.pid), "-m", "-u", "-n", "--"]
    return run_command([*prefix, *argv], input=input, timeout=timeout, check=check)


def run_command(
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    timeout: float = CMD_TIMEOUT_S,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` here, bounded by ``timeout``; with ``check``, a failure is a LabError."""
    try:
        done = subprocess.run(
            list(argv), input=input, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"`{shlex.join(argv)}` did not finish within {timeout:.0f} s") from None
    if check and done.returncode != 0:
        detail = tail_lines(done.stderr.decode(errors="replace"), 3)
        raise LabError(f"`{shlex.join(argv)}` exited {done.returncode}: {detail}")
    return done


# --------------------------------------------------------------------------- a network of hosts


class HostNetwork:
    """A bridge and the netns hosts on it; :meth:`down` removes everything it started.

    Addresses are handed out from ``first_host`` (the host part) upwards unless given.
    """

    def __init__(self, bridge: str, cidr: str, workdir: Path, *, first_host: int = 10) -> None:
        _check_iface(bridge)
        self.bridge = bridge
        self.network = ipaddress.ip_network(cidr)
        self.workdir = workdir
        self.first_host = first_host
        self.gateway: str | None = None
        self.hosts: dict[str, SshHost] = {}

    def up(self) -> HostNetwork:
        """Create the bridge (replacing a stale one with the same name)."""
        reason = netns_unavailable_reason()
        if reason:
            raise LabError(f"cannot start netns hosts: {reason}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.gateway = ensure_bridge(self.bridge, str(self.network))
        return self

    def start_host(
        self,
        name: str,
        *,
        address: str | None = None,
        mounts: Sequence[Mount] = (Mount("/srv"),),
        hostname: str | None = None,
        client_key: Path | None = None,
    ) -> SshHost:
        """Start a netns host on this network (``address`` without prefix, or the next free)."""
        if self.gateway is None:
            raise LabError(f"network {self.bridge} is not up")
        ip = address or self._next_address()
        host = start_netns_host(
            name,
            bridge=self.bridge,
            address=f"{ip}/{self.network.prefixlen}",
            workdir=self.workdir,
            mounts=mounts,
            hostname=hostname,
            client_key=client_key,
        )
        self.hosts[name] = host
        return host

    def restart_host(self, host: SshHost) -> SshHost:
        """:func:`restart_host`, keeping track of the new pid."""
        self.hosts[host.name] = restarted = restart_host(host)
        return restarted

    def stop_host(self, host: SshHost) -> None:
        """Stop and remove one host (idempotent)."""
        stop_host(self.hosts.pop(host.name, host))

    def down(self) -> None:
        """Stop every host started here and delete the bridge (idempotent).

        One host that fails to stop does not keep the others (or the bridge) alive.
        """
        failures: list[str] = []
        for host in list(self.hosts.values()):
            try:
                stop_host(host)
            except LabError as exc:
                failures.append(exc.message)
            self.hosts.pop(host.name, None)
        remove_bridge(self.bridge)
        self.gateway = None
        if failures:
            raise LabError("teardown incomplete: " + "; ".join(failures))

    def _next_address(self) -> str:
        used = {host.address for host in self.hosts.values()} | {self.gateway}
        for index, ip in enumerate(self.network.hosts(), start=1):
            if index >= self.first_host and str(ip) not in used:
                return str(ip)
        raise LabError(f"no free address left in {self.network}")

    def __enter__(self) -> HostNetwork:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()


# --------------------------------------------------------------------------- helpers


def _prepare_host_files(
    hostdir: Path, *, address: str, port: int, client_key: Path | None
) -> tuple[Path, Path]:
    """Host key, client key, authorized_keys and a known_hosts holding the host key."""
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


def _write_sshd_config(hostdir: Path, *, address: str, port: int) -> None:
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
    (hostdir / "sshd_config").write_text("\n".join(lines) + "\n")


def _keygen(path: Path, *, comment: str) -> None:
    run_command(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def flush_neighbours(host: SshHost) -> None:
    """Forget ARP entries for the host's address on both sides of its link.

    An address probed while its link was down (or held by an earlier host with another MAC)
    stays FAILED/stale for seconds, during which connects fail with "no route to host".
    """
    _ip("neigh", "flush", "to", host.address, check=False)
    if host.netns is not None:
        _ip("-n", host.netns, "neigh", "flush", "all", check=False)


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _kill_netns_pids(name: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = _netns_pids(name)
        if not pids:
            return
        if time.monotonic() > deadline:
            raise LabError(f"processes {pids} in namespace {name} survived SIGKILL")
        for pid in pids:
            _kill(pid)
        time.sleep(0.02)


def _netns_pids(name: str) -> list[int]:
    out = run_command(["ip", "netns", "pids", name], check=False).stdout.decode()
    return [int(token) for token in out.split() if token.isdigit()]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pid: int) -> None:
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _require_sshd() -> str:
    sshd = sshd_path()
    if sshd is None:
        raise LabError("sshd not found", hint="apt-get install openssh-server")
    return sshd


def _check_host_name(name: str) -> None:
    if not HOST_NAME_RE.match(name):
        raise LabError(f"host name {name!r}: use 1-13 of a-z, 0-9 and '-' (it names a veth)")


def _check_iface(name: str) -> None:
    if not IFACE_RE.match(name):
        raise LabError(f"interface name {name!r}: at most 15 letters, digits, '_', '.', '-'")


def _check_mounts(mounts: Iterable[Mount], hostdir: Path) -> None:
    # sshd re-executes itself per connection and re-reads its files from hostdir
    for mount in mounts:
        if hostdir.is_relative_to(mount.target):
            raise LabError(f"mount over {mount.target} would hide the host's files in {hostdir}")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return run_command(["ip", *args], check=check)
