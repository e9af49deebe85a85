"""Where a deployment lives in a container: every path dflashops manages there.

``/opt/dflashops/venv-<engine>-<version>`` per engine version (engines pin different torch
builds, so they never share one), the wheels pushed into them, ``/etc/dflashops`` for what
``launch`` renders (``launch.sh``, ``server.json``, ``secrets.env``, ``deployed.json``),
``/var/log/dflashops/server.log``. Replaced files keep timestamped backups next to them.

Run-time state (pids, events, the preflight report, the z-lab view of a speculators-layout
drafter that SGLang reads) goes under ``/var/lib/dflashops``, not
``/run``: a lab container shares this machine's ``/run``, and a stale pid after a reboot is
harmless because every pid is checked (alive, same mount namespace, our command line) before
it is trusted.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

ETC = "/etc/dflashops"
STATE = "/var/lib/dflashops"
LOG_DIR = "/var/log/dflashops"
OPT = "/opt/dflashops"
UNIT_NAME = "dflashops-server.service"


@dataclass(frozen=True)
class Layout:
    """Every managed path in one container (overridable as a whole for tests)."""

    etc: str = ETC
    state: str = STATE
    log_dir: str = LOG_DIR
    opt: str = OPT
    systemd_dir: str = "/etc/systemd/system"

    @property
    def spec(self) -> str:
        return posixpath.join(self.etc, "server.json")

    @property
    def launch_script(self) -> str:
        return posixpath.join(self.etc, "launch.sh")

    @property
    def supervisor(self) -> str:
        return posixpath.join(self.etc, "supervise.sh")

    @property
    def secrets(self) -> str:
        return posixpath.join(self.etc, "secrets.env")

    @property
    def manifest(self) -> str:
        return posixpath.join(self.etc, "deployed.json")

    @property
    def unit(self) -> str:
        return posixpath.join(self.systemd_dir, UNIT_NAME)

    @property
    def log(self) -> str:
        return posixpath.join(self.log_dir, "server.log")

    @property
    def pidfile(self) -> str:
        """The server's pid (the launch script's, kept through both execs)."""
        return posixpath.join(self.state, "server.pid")

    @property
    def supervisor_pidfile(self) -> str:
        return posixpath.join(self.state, "supervisor.pid")

    @property
    def events(self) -> str:
        """``start PID EPOCH`` / ``exit CODE EPOCH`` / ``gaveup EPOCH`` lines, appended."""
        return posixpath.join(self.state, "events")

    @property
    def preflight_report(self) -> str:
        return posixpath.join(self.state, "preflight.json")

    @property
    def drafter_view(self) -> str:
        """The z-lab view of a speculators-layout drafter that SGLang reads (one server, one)."""
        return posixpath.join(self.state, "drafter-zlab")

    @property
    def wheels(self) -> str:
        return posixpath.join(self.opt, "wheels")

    @property
    def training(self) -> str:
        """Drafter training runs, one folder per run name (data, checkpoints, export)."""
        return posixpath.join(self.state, "training")

    def training_run(self, name: str) -> str:
        return posixpath.join(self.training, name)

    def venv(self, engine: str, version: str) -> str:
        return posixpath.join(self.opt, f"venv-{engine}-{version}")


DEFAULT_LAYOUT = Layout()
