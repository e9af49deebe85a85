"""Real OpenSSH "hosts" on this machine, for tests and the lab: starting, restarting, stopping
and removing them, and running commands inside them.

Two kinds, both a private ``sshd`` kept as a :class:`subprocess.Popen` child of the caller:

* **netns hosts** (root only): a network namespace joined to a bridge by a veth pair, with its
  own address, its own hostname (UTS namespace) and private directories (mount namespace: tmpfs,
  copy-on-write overlays or bind mounts over chosen paths), sshd listening on port 22. The veth
  (``SshHost.veth``) and the namespace are named, so a test can break the link from outside.
* **loopback hosts** (any user): sshd on ``127.0.0.1`` and a free port, sharing this machine's
  filesystem; the login user is the caller.

Every host gets its own host key, a client key (generated or shared) in ``authorized_keys``, and
a ``known_hosts`` file that already holds the host key, so clients verify host keys in tests.

A container-like host for the lab: ``mounts=[Mount.overlay("/etc", upper=state / "etc"),
Mount.bind(state / "opt", "/opt", read_only=False), Mount.tmpfs("/root"), Mount.bind(venv,
venv_path)]`` gives it its own /etc and /opt (kept across :func:`restart_host`), an empty /root
and a read-only view of a venv. :func:`host_exec` runs a command inside a host without SSH.

Teardown is by name (namespace ``NAME``, root-side veth ``v-NAME``, bridge) and by PID; it is
idempotent, and starting a host or bridge first removes leftovers with the same name from a
crashed earlier run (:func:`remove_netns_hosts` sweeps a whole name prefix).

The parts below this module: :mod:`~dflashops.lab.host_model` (:class:`Mount`,
:class:`SshHost`), :mod:`~dflashops.lab.sshd` (keys, config, spawning sshd),
:mod:`~dflashops.lab.netns` (bridges, namespaces, killing a host's processes). A bridge with
hosts on it, torn down together: :class:`~dflashops.lab.host_network.HostNetwork`.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from dflashops.lab.errors import LabError
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.local_commands import CMD_TIMEOUT_S, run_command
from dflashops.lab.netns import (
    check_iface,
    kill_netns_pids,
    kill_processes,
    link_exists,
    netns_exists,
    run_ip,
)
from dflashops.lab.sshd import (
    free_port,
    prepare_host_files,
    spawn_loopback_sshd,
    spawn_netns_sshd,
    sshd_path,
    write_sshd_config,
)

# Interface names are at most 15 bytes; the root-side veth is "v-" + the host name.
HOST_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,12}$")
READY_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------- availability


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
    check_iface(bridge)
    iface = ipaddress.ip_interface(address)
    hostdir = (workdir / name).resolve()
    _check_mounts(mounts, hostdir)
    remove_netns_host(name)
    veth = f"v-{name}"
    try:
        run_ip("netns", "add", name)
        run_ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        run_ip("link", "set", veth, "master", bridge, "up")
        run_ip("-n", name, "addr", "add", str(iface), "dev", "eth0")
        run_ip("-n", name, "link", "set", "lo", "up")
        run_ip("-n", name, "link", "set", "eth0", "up")
        gateway = next(iface.network.hosts())
        if gateway != iface.ip:
            run_ip("-n", name, "route", "add", "default", "via", str(gateway))
        address_only = str(iface.ip)
        key_file, known_hosts = prepare_host_files(
            hostdir, address=address_only, port=22, client_key=client_key
        )
        write_sshd_config(hostdir, address=address_only, port=22)
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
        return spawn_netns_sshd(host, ready_timeout)
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
        return spawn_loopback_sshd(host, ready_timeout)
    return spawn_netns_sshd(host, ready_timeout)


def remove_netns_host(name: str) -> None:
    """Tear down host ``name`` by name: kill its processes, delete namespace and veth (idempotent).

    Works on leftovers of a crashed run, whose processes are no children of ours.
    """
    _check_host_name(name)
    if netns_exists(name):
        kill_netns_pids(name)
        run_ip("netns", "del", name, check=False)
    veth = f"v-{name}"
    if link_exists(veth):
        run_ip("link", "del", veth, check=False)


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


# --------------------------------------------------------------------------- loopback hosts


def start_loopback_host(
    name: str,
    *,
    workdir: Path,
    client_key: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
    session_env: Mapping[str, str] | None = None,
) -> SshHost:
    """Start sshd on 127.0.0.1 and a free port; log in as the calling user (root not needed).

    Files go to ``workdir/NAME``. The host shares this machine's filesystem and network (no
    link of its own to cut or slow). ``session_env``: see :func:`write_sshd_config`.
    """
    _check_host_name(name)
    hostdir = (workdir / name).resolve()
    user = pwd.getpwuid(os.geteuid()).pw_name
    last_error: LabError | None = None
    for _ in range(3):  # a free port can be taken between our probe and sshd's bind
        port = free_port()
        key_file, known_hosts = prepare_host_files(
            hostdir, address="127.0.0.1", port=port, client_key=client_key
        )
        write_sshd_config(hostdir, address="127.0.0.1", port=port, session_env=session_env)
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
            return spawn_loopback_sshd(host, ready_timeout)
        except LabError as exc:
            last_error = exc
    assert last_error is not None
    raise last_error


# --------------------------------------------------------------------------- lifecycle


def stop_host(host: SshHost) -> None:
    """Stop ``host`` and remove its namespace and veth (idempotent). Keeps ``host.workdir``."""
    kill_processes(host)
    if host.netns is not None:
        remove_netns_host(host.netns)


def host_alive(host: SshHost) -> bool:
    """Whether ``host``'s sshd still runs (and its namespace still exists)."""
    if host.netns is not None and not netns_exists(host.netns):
        return False
    if host.process is not None:
        return host.process.poll() is None  # a dead child of ours lingers as a zombie in /proc
    return Path(f"/proc/{host.pid}").exists()


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


# --------------------------------------------------------------------------- helpers


def _check_host_name(name: str) -> None:
    if not HOST_NAME_RE.match(name):
        raise LabError(f"host name {name!r}: use 1-13 of a-z, 0-9 and '-' (it names a veth)")


def _check_mounts(mounts: Iterable[Mount], hostdir: Path) -> None:
    # sshd re-executes itself per connection and re-reads its files from hostdir
    for mount in mounts:
        if hostdir.is_relative_to(mount.target):
            raise LabError(f"mount over {mount.target} would hide the host's files in {hostdir}")
