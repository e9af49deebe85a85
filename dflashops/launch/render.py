"""Render a deployment: the server spec, the launch script, the supervisor and the secrets file.

Pure: a playbook and the facts launch gathered go in, file contents come out. The server spec
(``server.json``) is a :class:`~dflashops.server.spec.ServerSpec` built here and dumped as JSON;
the scripts come from the Jinja2 templates (every value shell-quoted, see
:mod:`dflashops.launch.templates`).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Literal

from dflashops import __version__
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.drafter.registry import load_registry
from dflashops.launch.args import (
    SGLANG_DRAFTER_FLAG,
    VLLM_API_KEY_ENV,
    TargetFacts,
    engine_argv,
    engine_base_env,
    speculative_config,
)
from dflashops.launch.templates import render_template
from dflashops.playbook.models import Playbook
from dflashops.server.spec import ServerSpec

Supervisor = Literal["systemd", "fallback"]

# NCCL keeps intra-node buffers in /dev/shm; a container's 64 MB default breaks TP
TP_MIN_SHM_BYTES = 1 << 30


@dataclass(frozen=True)
class RestartPolicy:
    """How both supervisors restart a failed server."""

    max_restarts: int = 5  # failures in a row before giving up
    min_delay_s: int = 5  # doubled after each failure, up to max_delay_s
    max_delay_s: int = 120
    stable_s: int = 300  # a server that ran this long before failing starts the count again
    start_limit_interval_s: int = 600  # systemd's window for max_restarts


@dataclass(frozen=True)
class RenderedFile:
    path: str
    content: bytes
    mode: int = 0o644
    secret: bool = False

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True)
class RenderInputs:
    """Everything besides the playbook that decides the files."""

    supervisor: Supervisor
    venv_python: str
    required_env: dict[str, str] = field(default_factory=dict)
    # --force over a failing drafter check: the preflight must not refuse it either
    skip_drafter_validation: bool = False
    api_key: str | None = None
    target: TargetFacts = field(default_factory=TargetFacts)
    layout: Layout = DEFAULT_LAYOUT
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    dflashops_version: str = __version__
    # the drafter check found a speculators-layout DFlash drafter for SGLang: the server writes
    # its z-lab view (layout.drafter_view) and SGLang is given that folder
    zlab_view: bool = False


@dataclass(frozen=True)
class Rendered:
    spec: ServerSpec
    files: tuple[RenderedFile, ...]
    supervisor: Supervisor

    def file(self, path: str) -> RenderedFile:
        return next(f for f in self.files if f.path == path)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


def engine_env(playbook: Playbook, required_env: dict[str, str]) -> dict[str, str]:
    """The engine's own needs, the drafter's required variables, then the playbook's own (an
    explicit value wins)."""
    return {**engine_base_env(playbook), **required_env, **playbook.server.env}


def build_spec(playbook: Playbook, inputs: RenderInputs) -> ServerSpec:
    server, drafter = playbook.server, playbook.drafter
    config = speculative_config(playbook)
    method = None if config is None else str(config["method"])
    if inputs.skip_drafter_validation:
        # ServerSpec has no switch for it; without a method preflight checks the drafter's
        # files but does not validate its config (the argv still carries the method)
        method = None
    cuda = server.device == "cuda"
    drafter_path = drafter.model.path if drafter.model is not None else None
    if drafter.method == "mtp":
        # MTP drafts with the target's own extra layers: its "drafter files" are the target's
        drafter_path = playbook.model.path
    argv = engine_argv(playbook, inputs.venv_python, inputs.target)
    zlab = inputs.zlab_view and playbook.engine.name == "sglang" and drafter_path is not None
    view = inputs.layout.drafter_view if zlab else None
    if view is not None:
        argv[argv.index(SGLANG_DRAFTER_FLAG) + 1] = view
    return ServerSpec(
        engine=playbook.engine.name,
        engine_version=playbook.engine.version,
        argv=argv,
        model=str(playbook.model.path),
        drafter=str(drafter_path) if drafter_path is not None else None,
        method=method,
        drafter_ref=bundled_ref(drafter.ref),
        num_speculative_tokens=server.num_speculative_tokens,
        tensor_parallel_size=server.tensor_parallel_size,
        expect_cuda=cuda,
        min_shm_bytes=TP_MIN_SHM_BYTES if cuda and server.tensor_parallel_size > 1 else 0,
        env=engine_env(playbook, inputs.required_env),
        preflight_report=inputs.layout.preflight_report,
        pidfile=inputs.layout.pidfile,
        collective_check=cuda and server.collective_check,
        drafter_view=view,
    )


def bundled_ref(ref: str | None) -> str | None:
    """``drafter.ref`` for the host's preflight when it names an entry of the registry the wheel
    carries; an entry file exists only here (launch's own check used it), so it is left out."""
    if ref is None:
        return None
    return ref if load_registry().find(ref) is not None else None


def summary(playbook: Playbook) -> str:
    k = playbook.server.num_speculative_tokens
    method = playbook.drafter.method + (f" k={k}" if k else "")
    return (
        f"{playbook.engine.name} {playbook.engine.version}, {method}, "
        f"{playbook.served_name} on port {playbook.server.port}"
    )


def render(playbook: Playbook, inputs: RenderInputs) -> Rendered:
    """Every managed file of this deployment, in the order they are pushed."""
    layout = inputs.layout
    spec = build_spec(playbook, inputs)
    common = {
        "dflashops_version": inputs.dflashops_version,
        "playbook": playbook.name,
        "state_dir": layout.state,
        "log_dir": layout.log_dir,
        "log_file": layout.log,
        "events_file": layout.events,
        "launch_script": layout.launch_script,
        "max_restarts": inputs.restart.max_restarts,
        "min_delay_s": inputs.restart.min_delay_s,
        "max_delay_s": inputs.restart.max_delay_s,
    }
    launch = render_template(
        "launch.sh.j2",
        {
            **common,
            "started_by": "systemd" if inputs.supervisor == "systemd" else layout.supervisor,
            "secrets_file": layout.secrets,
            "env": sorted(spec.env.items()),
            "pidfile": layout.pidfile,
            "summary": summary(playbook),
            "python": inputs.venv_python,
            "spec_file": layout.spec,
        },
    )
    files = [
        RenderedFile(layout.spec, spec.to_json().encode()),
        RenderedFile(layout.launch_script, launch.encode(), 0o755),
    ]
    if inputs.supervisor == "systemd":
        unit = render_template(
            "dflashops-server.service.j2",
            {**common, "start_limit_interval_s": inputs.restart.start_limit_interval_s},
        )
        files.append(RenderedFile(layout.unit, unit.encode()))
    else:
        supervise = render_template(
            "supervise.sh.j2",
            {
                **common,
                "supervisor_pidfile": layout.supervisor_pidfile,
                "stable_s": inputs.restart.stable_s,
            },
        )
        files.append(RenderedFile(layout.supervisor, supervise.encode(), 0o755))
    if inputs.api_key is not None:
        secrets = render_template(
            "secrets.env.j2", {"secrets": [(VLLM_API_KEY_ENV, inputs.api_key)]}
        )
        files.append(RenderedFile(layout.secrets, secrets.encode(), 0o600, secret=True))
    return Rendered(spec=spec, files=tuple(files), supervisor=inputs.supervisor)


def venv_python(playbook: Playbook, layout: Layout = DEFAULT_LAYOUT) -> str:
    venv = layout.venv(playbook.engine.name, playbook.engine.version)
    return posixpath.join(venv, "bin", "python")
