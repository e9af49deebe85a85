"""`pip install .` into a fresh venv, as a user who is not root, gives a working CLI with no lab
set up (issue 31): `--help`, `drafter check`, `parse-log` and `tune-offline`, and no inventory
falls back to the lab's.

The dependencies come from the project venv (a ``.pth`` line puts its site-packages after the
fresh one, as ``--system-site-packages`` would put a base interpreter's), and dflashops itself is
installed with ``--no-deps --no-index`` from a frozen copy of the checkout: no network, no
editable install, nothing of the checkout on the path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRAFTERS = REPO / "tests" / "fixtures" / "drafter"
LOG = REPO / "tests" / "fixtures" / "logs" / "real-vllm-0.32.0-cpu-ngram.log"
USER = "nobody"  # the user the install runs as when the tests run as root


@dataclass(frozen=True)
class Installed:
    venv: Path
    home: Path
    workdir: Path
    as_user: tuple[str, ...]  # the command prefix that runs as the unprivileged user

    def run(self, *argv: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        bin_dir = self.venv / "bin"
        env = {
            "HOME": str(self.home),
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "PIP_CONFIG_FILE": os.devnull,  # this machine's pip config names local indexes
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        command = [*self.as_user, "env", "-i", *(f"{k}={v}" for k, v in env.items())]
        return subprocess.run(
            [*command, *map(str, argv)],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def dflashops(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(self.venv / "bin" / "dflashops", *args)


def _unprivileged() -> tuple[str, ...]:
    if os.geteuid() != 0:
        return ()
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: cannot install as an unprivileged user")
    return (runuser, "-u", USER, "--")


def _base_python(as_user: Sequence[str]) -> str:
    """An interpreter of this Python version that the unprivileged user may run (a root-only
    pyenv under /root is not one)."""
    wanted = f"{sys.version_info.major}.{sys.version_info.minor}"
    base: str | None = getattr(sys, "_base_executable", None)
    candidates = [base, shutil.which(f"python{wanted}"), f"/usr/bin/python{wanted}"]
    for candidate in filter(None, candidates):
        probe = [*as_user, candidate, "-c", "import sys, venv; print(sys.version[:4])"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0 and done.stdout.strip().startswith(wanted):
            return candidate
    pytest.skip(f"no Python {wanted} with venv that {USER} can run")


def _frozen_source(into: Path) -> Path:
    """The files `pip install .` reads, copied (other work may change the checkout meanwhile)."""
    source = into / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("dflashops", "templates", "playbooks"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    return source


def _give_to(user: str, top: Path) -> None:
    top.chmod(0o755)  # mkdtemp makes it 0700; the user must reach into it
    for path in (top, *top.rglob("*")):
        shutil.chown(path, user, user if user != "nobody" else "nogroup")


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    as_user = _unprivileged()
    python = _base_python(as_user)
    # under /tmp itself: pytest's tmp_path lies in a root-only folder
    top = Path(tempfile.mkdtemp(prefix="dflashops-fresh-venv-"))
    try:
        source = _frozen_source(top)
        for folder in ("home", "work"):
            (top / folder).mkdir()
        if as_user:
            _give_to(USER, top)
        box = Installed(top / "venv", top / "home", top / "work", as_user)
        created = box.run(python, "-m", "venv", "--without-pip", box.venv)
        assert created.returncode == 0, created.stderr
        # the project venv's packages (pip, hatchling and dflashops' dependencies) after ours
        purelib = box.run(
            box.venv / "bin" / "python", "-c", "import site; print(site.getsitepackages()[0])"
        )
        (Path(purelib.stdout.strip()) / "project-venv.pth").write_text(
            sysconfig.get_paths()["purelib"] + "\n"
        )
        pip = box.run(
            *(box.venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index"),
            *("--no-build-isolation", "--no-cache-dir", "--quiet", source),
            timeout=120,
        )
        assert pip.returncode == 0, pip.stderr
        yield box
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_install_is_the_venvs_own(installed: Installed) -> None:
    done = installed.run(
        installed.venv / "bin" / "python",
        "-c",
        "import os, dflashops; print(dflashops.__file__); print(os.geteuid())",
    )
    assert done.returncode == 0, done.stderr
    where, uid = done.stdout.split()
    assert Path(where).is_relative_to(installed.venv)
    assert uid != "0"


def test_help(installed: Installed) -> None:
    done = installed.dflashops("--help")
    assert done.returncode == 0, done.stderr
    for command in ("drafter", "parse-log", "tune-offline", "lab"):
        assert command in done.stdout


def test_drafter_check_of_the_incident(installed: Installed) -> None:
    """The bundled registry travels with the install: the guessed config is refused against its
    entry (exit 4), the corrected one passes."""
    target = DRAFTERS / "qwen36-27b-target"
    guessed = installed.dflashops(
        "drafter", "check", DRAFTERS / "qwen36-27b-dflash-guessed", "--target", target, "--json"
    )
    assert guessed.returncode == 4, guessed.stderr
    report = json.loads(guessed.stdout)
    assert report["ref"] == "z-lab/Qwen3.6-27B-DFlash" and report["summary"]["errors"] == 3
    corrected = installed.dflashops(
        "drafter", "check", DRAFTERS / "qwen36-27b-dflash-corrected", "--target", target
    )
    assert corrected.returncode == 0, corrected.stdout + corrected.stderr


def test_parse_log(installed: Installed) -> None:
    done = installed.dflashops("parse-log", LOG, "--json")
    assert done.returncode == 0, done.stderr
    parsed = json.loads(done.stdout)
    assert parsed["engine_version"] == "0.32.0" and parsed["throughput_windows"]


def test_tune_offline(installed: Installed) -> None:
    done = installed.dflashops(
        *("tune-offline", "--acceptance", "0.8,0.5,0.3", "--step-cost", "1:0.020,4:0.026"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["best_k"] == 3


def test_no_inventory_names_the_ways_to_give_one(installed: Installed) -> None:
    done = installed.dflashops("inventory", "show")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    for named in ("-i FILE", "DFLASHOPS_INVENTORY", "inventory/example.yaml"):
        assert named in line
