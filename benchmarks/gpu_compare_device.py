"""Issue 37's ``dflashops compare --engines vllm,sglang`` on a GPU machine without containers.

The device lent for GPU work is one machine (gVisor, root, no network, no systemd): no PVE, no
LXC. ``compare`` works on a container it reaches over SSH, so this script makes the machine its
own "container" the way the lab makes loopback hosts, and then runs the product unchanged:

1. a real OpenSSH ``sshd`` on 127.0.0.1 (``dflashops.lab.sshd``: host key, client key,
   known_hosts holding the host key, so host keys are verified as everywhere else). A machine
   without openssh-server gets ``--openssh`` (``gpu_openssh_bundle.sh``: Debian 12's sshd and
   ssh-keygen with their libraries, run through wrappers so the libraries never reach the
   sessions). sshd builds each session's environment from scratch, so ``SetEnv`` hands the
   sessions this machine's PATH, LD_LIBRARY_PATH and CUDA variables (the driver's libraries,
   nvcc for SGLang's JIT kernels), as a container's own profile would;
2. one base venv per engine at the playbook's ``engine.base_venv``: ``--venv`` links an existing
   venv there (a dry run off the GPU: the lab's CPU venvs); ``--site`` makes a venv whose
   site-packages holds links to the unpacked payload's packages and then to the image's (torch,
   CUDA wheels, pip), the payload winning by module and by distribution name, as ``PYTHONPATH``
   does for ``gpu_run.py``. launch then makes its thin venv on it and installs the pushed wheel;
3. an inventory naming the loopback host, and ``dflashops compare NAME -p PLAYBOOK
   --skip-pve-check`` (there is no PVE to ask), then ``report --plots``, then ``stop``.

Run from the repository root, with dflashops importable (``PYTHONPATH=/root/gpu/extra:...``)::

    python3 benchmarks/gpu_compare_device.py --openssh .gpu/compare/openssh.tar.xz \\
      --site vllm=/root/gpu/vllm-site --site sglang=/root/gpu/site \\
      --playbook benchmarks/results/gpu-h200-compare-playbooks/qwen3-8b-dflash.yaml \\
      --wheel .gpu/compare/dflashops-container.whl --out $OUT \\
      -- --engines vllm,sglang==0.5.15 --methods dflash

Everything after ``--`` goes to ``compare``. Files: ``--root`` (``/root/gpu``) ``/compare``.
The machine itself becomes the container: launch writes the container layout (``/etc/dflashops``,
``/opt/dflashops``, ``/var/lib/dflashops``, ``/var/log/dflashops``) on it, so run this on a
throwaway machine; one that already holds a deployment is refused unless ``--again`` says it was
this script's.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml

from dflashops.lab.host_model import SshHost
from dflashops.lab.hosts import start_loopback_host, stop_host
from dflashops.lab.sshd import sshd_path

CONTAINER = "gpu-h200"
LOG_DIR = "/var/log/dflashops"  # the container layout's (dflashops.deployment.layout)
MANIFEST = Path("/etc/dflashops/deployed.json")
# what a session needs from this machine's environment: the driver's and CUDA's libraries, nvcc
# (SGLang compiles its JIT kernels at first use), and the image's python3 ahead of the system's
PASSED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES")
PRIVSEP_LINE = "sshd:x:74:65534:privilege separation:/run/sshd:/usr/sbin/nologin\n"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- OpenSSH


def install_openssh(bundle: Path, into: Path) -> None:
    """Unpack the bundle and put wrappers for sshd and ssh-keygen first on PATH."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle) as tar:
        tar.extractall(into, filter="data")
    wrappers = into / "bin"
    wrappers.mkdir(exist_ok=True)
    for tool in ("sshd", "ssh-keygen"):
        wrapper = wrappers / tool
        real, libs = into / "real" / tool, into / "lib"
        # the libraries for these two binaries only: sshd resets the environment of its sessions
        wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={libs} exec {real} "$@"\n')
        wrapper.chmod(0o755)
    os.environ["PATH"] = f"{wrappers}:{os.environ['PATH']}"
    # OpenSSH 9.2 as root refuses to start without its privilege separation user
    try:
        pwd.getpwnam("sshd")
    except KeyError:
        with Path("/etc/passwd").open("a") as passwd:
            passwd.write(PRIVSEP_LINE)
        say("added the sshd privilege separation user to /etc/passwd")


# --------------------------------------------------------------------------- base venvs


def project(entry: str) -> str | None:
    """The normalized distribution name of a ``*.dist-info`` folder, else None."""
    if not entry.endswith(".dist-info"):
        return None
    return re.sub(r"[-_.]+", "_", entry[: -len(".dist-info")].split("-", maxsplit=1)[0]).lower()


def image_site_dirs(python: str) -> list[Path]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    return [Path(p) for p in json.loads(out) if Path(p).is_dir()]


def merged_venv(venv: Path, payload: Path, python: str) -> int:
    """A venv whose site-packages links the payload's entries, then the image's not shadowed."""
    subprocess.run([python, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True)
    purelib = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    taken: set[str] = set()
    projects: set[str] = set()
    linked = 0
    for source in [payload, *image_site_dirs(python)]:
        for path in sorted(source.iterdir()):
            entry = path.name
            name = project(entry)
            if entry in taken or entry == "__pycache__" or (name and name in projects):
                continue
            if source != payload and entry.endswith(".pth"):
                continue  # a .pth of the image names the image's own paths: not needed here
            (purelib / entry).symlink_to(path)
            taken.add(entry)
            linked += 1
            if name:
                projects.add(name)
    return linked


def base_venvs(playbook: dict[str, Any], args: argparse.Namespace) -> None:
    template = str(playbook["engine"]["base_venv"])
    for kind, items in (("site", args.site), ("venv", args.venv)):
        for item in items:
            engine, version, path = item.split("=", 2)
            where = Path(template.replace("{engine}", engine).replace("{version}", version))
            if where.is_symlink():
                where.unlink()
            elif where.exists() and not (where / "pyvenv.cfg").exists():
                sys.exit(f"{where} exists and is no venv: not touching it")
            where.parent.mkdir(parents=True, exist_ok=True)
            if kind == "venv":
                if where.exists():
                    sys.exit(f"{where} is a venv, not a link: not touching it")
                where.symlink_to(Path(path).resolve())
                say(f"base venv {where} -> {path}")
            else:
                linked = merged_venv(where, Path(path), args.python)
                say(f"base venv {where}: {linked} entries linked ({path} first)")


# --------------------------------------------------------------------------- inventory, compare


def write_inventory(path: Path, host: SshHost) -> None:
    inventory = {
        "version": 1,
        # never contacted: compare runs with --skip-pve-check (there is no PVE on the device)
        "clusters": {"device": {"api_url": "https://127.0.0.1:8006", "verify_tls": True,
                                "auth": {"user": "root@pam", "password": {"env": "PVE_PASSWORD"}},
                                "nodes": {"device": {"ssh": {"host": "127.0.0.1"}}}}},
        "containers": {CONTAINER: {
            "cluster": "device", "node": "device",
            "ssh": {"host": host.address, "port": host.port, "user": host.user,
                    "key_file": str(host.key_file), "known_hosts": str(host.known_hosts)},
        }},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))


def dflashops(argv: list[str], log: Path, env: dict[str, str]) -> int:
    say("$ dflashops " + shlex.join(argv))
    with log.open("a") as out:
        out.write(f"$ dflashops {shlex.join(argv)}\n")
        out.flush()
        started = time.monotonic()
        code = subprocess.run(
            [sys.executable, "-m", "dflashops", *argv], check=False, stdout=out,
            stderr=subprocess.STDOUT, env=env,
        ).returncode  # fmt: skip
        out.write(f"# exit {code} after {time.monotonic() - started:.1f} s\n")
    say(f"exit {code}")
    return code


def keep_server_logs(folder: Path, into: Path, lines: int = 400) -> None:
    """The tail of each server log launch wrote (one per cell: launch keeps the replaced ones)."""
    into.mkdir(parents=True, exist_ok=True)
    for log in sorted(folder.glob("server.log*")) if folder.is_dir() else []:
        text = log.read_text(errors="replace").splitlines()[-lines:]
        (into / log.name).write_text("\n".join(text) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("/root/gpu"))
    parser.add_argument("--playbook", type=Path, required=True)
    parser.add_argument("--site", action="append", default=[], help="ENGINE=VERSION=SITE_DIR")
    parser.add_argument("--venv", action="append", default=[], help="ENGINE=VERSION=VENV_DIR")
    parser.add_argument("--python", default="python3", help="the image's interpreter")
    parser.add_argument("--openssh", type=Path, help="gpu_openssh_bundle.sh's archive")
    parser.add_argument("--wheel", type=Path, help="the container wheel (DFLASHOPS_WHEEL)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--again", action="store_true", help="this machine's deployment is an earlier run's"
    )
    parser.add_argument("compare_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = [a for a in args.compare_args if a != "--"]
    if MANIFEST.exists() and not args.again:
        sys.exit(f"{MANIFEST} exists: this machine serves a deployment; --again if it is ours")
    work = args.root / "compare"
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "compare.log"
    log.write_text("")

    if sshd_path() is None:
        if args.openssh is None:
            sys.exit("no sshd here: pass --openssh (benchmarks/gpu_openssh_bundle.sh)")
        install_openssh(args.openssh, work / "openssh")
    session_env = {name: os.environ[name] for name in PASSED_ENV if os.environ.get(name)}
    host = start_loopback_host(CONTAINER, workdir=work / "hosts", session_env=session_env)
    say(f"sshd on {host.address}:{host.port} (pid {host.pid}); sessions get {sorted(session_env)}")
    try:
        playbook = yaml.safe_load(args.playbook.read_text())
        base_venvs(playbook, args)
        inventory = work / "inventory.yaml"
        write_inventory(inventory, host)
        env = dict(os.environ, DFLASHOPS_INVENTORY=str(inventory), PYTHONUNBUFFERED="1")
        if args.wheel:
            env["DFLASHOPS_WHEEL"] = str(args.wheel.resolve())
        skip = "--skip-pve-check"
        result = args.out / "compare.json"
        code = dflashops(
            ["compare", CONTAINER, "-p", str(args.playbook), skip, "--out", str(result), *extra],
            log, env,
        )  # fmt: skip
        if result.exists():
            dflashops(["report", str(result), "--plots", str(args.out / "plots")], log, env)
        dflashops(["stop", CONTAINER, skip], log, env)
        return code
    finally:
        stop_host(host)
        shutil.copy(host.log_file, args.out / "sshd.log")
        keep_server_logs(Path(LOG_DIR), args.out / "server-logs")


if __name__ == "__main__":
    sys.exit(main())
