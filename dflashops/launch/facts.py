"""What a launch reads in one container before it plans: what runs, what was deployed, the engine
venv, and the sha256 and mode of every file a launch may write there.

Reading only: nothing here changes the container, so a dry run and a real launch gather the
same facts and plan from them the same way (:mod:`dflashops.launch.launch_plan`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace

from dflashops.deployment.layout import Layout
from dflashops.deployment.manifest import DeployedManifest, ManifestUnreadable, read_manifest
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel
from dflashops.errors import RemoteError
from dflashops.launch import lifecycle
from dflashops.launch.members import member_tmp_marker, placement_file
from dflashops.launch.render import Supervisor
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection, get_text

# sha256 and octal mode of a file; None: it does not exist
FileFact = tuple[str, int] | None


@dataclass(frozen=True)
class HostFacts:
    """One container, as a launch found it."""

    name: str
    address: str
    layout: Layout
    state: lifecycle.RunState
    manifest: DeployedManifest | None
    files: dict[str, FileFact]
    # the engine venv as the playbook wants it; None for a restart, which keeps what is there
    venv_wanted: engine_venv.VenvWanted | None = None
    venv: engine_venv.VenvFacts | None = None
    # deployed.json exists but cannot be read: why (``launch --force`` rebuilds it)
    manifest_problem: str | None = None

    @property
    def supervisor(self) -> Supervisor:
        return "systemd" if self.state.systemd else "fallback"


def launch_paths(layout: Layout) -> list[str]:
    """Every file a launch renders, on any supervisor and any role (the plan picks its own)."""
    return [
        layout.spec,
        layout.launch_script,
        layout.unit,
        layout.supervisor,
        layout.secrets,
        placement_file(layout),
        member_tmp_marker(layout),
    ]


def sha_script(paths: list[str]) -> str:
    lines = []
    for path in paths:
        q = shlex.quote(path)
        lines.append(
            f'if [ -f {q} ]; then echo "$(sha256sum < {q} | cut -c1-64) $(stat -c %a {q})"; '
            "else echo '- -'; fi"
        )
    return "\n".join(lines)


def parse_shas(paths: list[str], output: str) -> dict[str, FileFact]:
    found: dict[str, FileFact] = {}
    for path, line in zip(paths, output.splitlines(), strict=True):
        digest, _, mode = line.partition(" ")
        found[path] = None if digest == "-" else (digest, int(mode, 8))
    return found


def remote_shas(conn: SshConnection, paths: list[str]) -> dict[str, FileFact]:
    out = conn.run(sha_script(paths), deadline=60.0, display="hash deployed files").stdout
    return parse_shas(paths, out)


def read_host(
    conn: SshConnection,
    name: str,
    address: str,
    *,
    playbook: Playbook,
    wheel: LocalWheel,
    layout: Layout,
) -> HostFacts:
    """Everything a launch plans from in container ``name`` (four SSH commands)."""
    wanted = engine_venv.VenvWanted(playbook.engine, wheel, layout)
    return replace(
        read_deployed(conn, name, address, layout),
        files=remote_shas(conn, launch_paths(layout)),
        venv_wanted=wanted,
        venv=engine_venv.probe(conn, wanted),
    )


def read_deployed(conn: SshConnection, name: str, address: str, layout: Layout) -> HostFacts:
    """What a restart plans from: what runs and what was deployed (two SSH commands)."""
    state = lifecycle.run_state(conn, layout)
    try:
        manifest, problem = read_manifest(conn, layout), None
    except ManifestUnreadable as exc:
        manifest, problem = None, exc.message
    return HostFacts(
        name=name,
        address=address,
        layout=layout,
        state=state,
        manifest=manifest,
        files={},
        manifest_problem=problem,
    )


def read_preflight(conn: SshConnection, path: str) -> tuple[dict[str, str], bool]:
    """What the bundled server's preflight added when it started the engine: its extra
    environment, and whether it turned NCCL's peer-to-peer off (``{}, False`` when unreadable)."""
    try:
        report = json.loads(get_text(conn, path))
    except (RemoteError, ValueError):
        return {}, False
    if not isinstance(report, dict):
        return {}, False
    exec_env = {str(k): str(v) for k, v in dict(report.get("exec_env") or {}).items()}
    return exec_env, bool(report.get("nccl_p2p_disable"))
