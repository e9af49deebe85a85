"""The engine venv in a container: facts → plan → apply.

``/opt/dflashops/venv-<engine>-<version>/`` holds one engine version and dflashops' own wheel
(the bundled server). Two ways to get the engine into it:

* a real deployment: ``python3 -m venv`` and ``pip install vllm==X`` (or ``sglang[all]==X``);
* ``engine.base_venv`` (the lab): a thin venv made with the base venv's interpreter
  (``--without-pip``) and a ``.pth`` file naming the base venv's site-packages, so the engine,
  torch and pip come from there while dflashops is installed into the thin venv itself (which
  comes first on ``sys.path``, so the container runs exactly the pushed wheel).

dflashops' wheel is installed with ``--no-deps`` (the bundled server needs only the standard
library and :mod:`dflashops.drafter`), and a marker file records which wheel (sha256) is in.
``launch`` refuses to start a server whose venv holds another dflashops than the CLI's.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.engine.wheel import LocalWheel
from dflashops.errors import DflashopsError
from dflashops.playbook.models import Engine
from dflashops.remote import SshConnection, put_atomic

MARKER = "dflashops-wheel.json"
PTH_NAME = "dflashops-base-venv.pth"
PROBE_DEADLINE_S = 60.0
VENV_DEADLINE_S = 300.0
ENGINE_INSTALL_DEADLINE_S = 3600.0
WHEEL_INSTALL_DEADLINE_S = 300.0
PIP_FLAGS = "--disable-pip-version-check --no-input"

# Runs with a venv's (or base venv's) interpreter: where its packages go and what is installed.
_PROBE_PY = r"""
import json, sys, sysconfig
import importlib.metadata as md
def version(name):
    try:
        return md.version(name)
    except Exception:
        return None
out = {"purelib": sysconfig.get_paths()["purelib"], "python": sys.version.split()[0],
       "engine": version(sys.argv[1]), "dflashops": version("dflashops")}
try:
    import pip  # noqa: F401
    out["pip"] = True
except Exception:
    out["pip"] = False
print(json.dumps(out))
"""


class EngineVenvError(DflashopsError):
    """The engine venv cannot be made or does not hold what the playbook pins."""


@dataclass(frozen=True)
class PythonFacts:
    purelib: str
    python: str
    engine_version: str | None
    dflashops_version: str | None
    has_pip: bool


@dataclass(frozen=True)
class VenvFacts:
    """What the container has, read by one probe."""

    venv: str
    venv_python: PythonFacts | None  # None: no working venv there
    base: PythonFacts | None  # None: no base_venv wanted, or it is missing
    base_wanted: str | None
    pth: str | None  # the .pth line, when the file exists
    marker: dict[str, Any] | None
    has_python3: bool


@dataclass(frozen=True)
class VenvWanted:
    engine: Engine
    wheel: LocalWheel
    layout: Layout = DEFAULT_LAYOUT

    @property
    def venv(self) -> str:
        return self.layout.venv(self.engine.name, self.engine.version)

    @property
    def python(self) -> str:
        return posixpath.join(self.venv, "bin", "python")

    @property
    def remote_wheel(self) -> str:
        return posixpath.join(self.layout.wheels, self.wheel.sha256[:16], self.wheel.filename)

    @property
    def requirement(self) -> str:
        name = "sglang[all]" if self.engine.name == "sglang" else "vllm"
        return f"{name}=={self.engine.version}"


@dataclass(frozen=True)
class VenvAction:
    """One step of :func:`apply`; ``kind`` says which, ``detail`` says it to the operator."""

    kind: str  # create | link-base | install-engine | push-wheel | install-wheel
    detail: str


@dataclass(frozen=True)
class VenvPlan:
    actions: tuple[VenvAction, ...]
    noop_reason: str | None = None

    @property
    def empty(self) -> bool:
        return not self.actions


def engine_dist(engine: Engine) -> str:
    return engine.name


def release(version: str | None) -> str | None:
    """``0.32.0+cpu`` → ``0.32.0`` (a local build tag does not change the release)."""
    return version.split("+", 1)[0] if version else None


# --------------------------------------------------------------------------- facts


def probe_script(wanted: VenvWanted) -> str:
    q = shlex.quote
    dist = q(engine_dist(wanted.engine))
    venv = wanted.venv
    lines = [
        f"V={q(venv)}",
        f'if [ -x "$V/bin/python" ] && "$V/bin/python" -c \'\' 2>/dev/null; then '
        f'echo "venv $("$V/bin/python" -c {q(_PROBE_PY)} {dist} 2>/dev/null || echo null)"; '
        "else echo 'venv null'; fi",
        f'm="$V"/{MARKER}; if [ -f "$m" ]; then echo "marker $(tr -d \'\\n\' < "$m")"; '
        "else echo 'marker null'; fi",
        'p=$(ls "$V"/lib/python3*/site-packages/' + PTH_NAME + " 2>/dev/null | head -n1); "
        'if [ -n "$p" ]; then echo "pth $(head -n1 "$p")"; else echo "pth"; fi',
        "if command -v python3 >/dev/null 2>&1; then echo 'python3 1'; else echo 'python3 0'; fi",
    ]
    base = wanted.engine.base_venv
    if base is not None:
        lines.append(
            f'B={q(str(base))}; if [ -x "$B/bin/python" ]; then '
            f'echo "base $("$B/bin/python" -c {q(_PROBE_PY)} {dist} 2>/dev/null || echo null)"; '
            "else echo 'base null'; fi"
        )
    return "\n".join(lines)


def parse_facts(wanted: VenvWanted, output: str) -> VenvFacts:
    found: dict[str, str] = {}
    for line in output.splitlines():
        key, _, value = line.partition(" ")
        found[key] = value.strip()
    marker = _json(found.get("marker"))
    return VenvFacts(
        venv=wanted.venv,
        venv_python=_python_facts(found.get("venv")),
        base=_python_facts(found.get("base")),
        base_wanted=str(wanted.engine.base_venv) if wanted.engine.base_venv else None,
        pth=found.get("pth") or None,
        marker=marker if isinstance(marker, dict) else None,
        has_python3=found.get("python3") == "1",
    )


def _json(text: str | None) -> Any:
    if not text or text == "null":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _python_facts(text: str | None) -> PythonFacts | None:
    data = _json(text)
    if not isinstance(data, dict) or "purelib" not in data:
        return None
    return PythonFacts(
        purelib=str(data["purelib"]),
        python=str(data.get("python")),
        engine_version=data.get("engine"),
        dflashops_version=data.get("dflashops"),
        has_pip=bool(data.get("pip")),
    )


def probe(conn: SshConnection, wanted: VenvWanted) -> VenvFacts:
    result = conn.run(probe_script(wanted), deadline=PROBE_DEADLINE_S, display="probe venv")
    return parse_facts(wanted, result.stdout)


# --------------------------------------------------------------------------- plan


def wheel_matches(facts: VenvFacts, wheel: LocalWheel) -> bool:
    marker = facts.marker or {}
    return (
        facts.venv_python is not None
        and facts.venv_python.dflashops_version == wheel.version
        and marker.get("sha256") == wheel.sha256
    )


def plan(facts: VenvFacts, wanted: VenvWanted) -> VenvPlan:
    """The steps that make the venv hold the pinned engine and this dflashops wheel."""
    engine = wanted.engine
    actions: list[VenvAction] = []
    fresh = facts.venv_python is None
    if engine.base_venv is not None:
        base = facts.base
        if base is None:
            raise EngineVenvError(
                f"engine.base_venv {engine.base_venv} has no working bin/python in the container",
                hint="mount or create it first (the lab mounts its vLLM venv there)",
            )
        if release(base.engine_version) != engine.version:
            raise EngineVenvError(
                f"engine.base_venv {engine.base_venv} has {engine.name} "
                f"{base.engine_version or 'not installed'}, the playbook pins {engine.version}"
            )
        if not base.has_pip:
            raise EngineVenvError(f"engine.base_venv {engine.base_venv} has no pip")
        if fresh:
            actions.append(
                VenvAction("create", f"thin venv {wanted.venv} with {engine.base_venv}/bin/python")
            )
        if fresh or facts.pth != base.purelib:
            actions.append(VenvAction("link-base", f"{PTH_NAME} -> {base.purelib}"))
    else:
        if fresh:
            if not facts.has_python3:
                raise EngineVenvError("the container has no python3 to make the engine venv")
            actions.append(VenvAction("create", f"venv {wanted.venv} with python3"))
        installed = None if fresh else release(facts.venv_python.engine_version)  # type: ignore[union-attr]
        if installed != engine.version:
            was = f" (has {installed})" if installed else ""
            actions.append(VenvAction("install-engine", f"pip install {wanted.requirement}{was}"))
    if fresh or not wheel_matches(facts, wanted.wheel):
        actions.append(VenvAction("push-wheel", wanted.remote_wheel))
        actions.append(
            VenvAction(
                "install-wheel",
                f"dflashops {wanted.wheel.version} (sha256 {wanted.wheel.sha256[:12]})",
            )
        )
    if actions:
        return VenvPlan(tuple(actions))
    assert facts.venv_python is not None
    return VenvPlan(
        (),
        noop_reason=(
            f"{wanted.venv} ready: {engine.name} {facts.venv_python.engine_version}, "
            f"dflashops {wanted.wheel.version} (sha256 {wanted.wheel.sha256[:12]})"
        ),
    )


# --------------------------------------------------------------------------- apply


def apply(conn: SshConnection, wanted: VenvWanted, venv_plan: VenvPlan, facts: VenvFacts) -> None:
    q = shlex.quote
    venv, python = wanted.venv, wanted.python
    for action in venv_plan.actions:
        if action.kind == "create":
            maker = (
                posixpath.join(str(wanted.engine.base_venv), "bin", "python")
                if wanted.engine.base_venv is not None
                else "python3"
            )
            flags = "--clear --without-pip" if wanted.engine.base_venv is not None else "--clear"
            conn.run(
                f"mkdir -p {q(posixpath.dirname(venv))} && {q(maker)} -m venv {flags} {q(venv)}",
                deadline=VENV_DEADLINE_S,
            )
        elif action.kind == "link-base":
            assert facts.base is not None
            purelib = conn.run(
                f"{q(python)} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'",
                deadline=PROBE_DEADLINE_S,
            ).stdout.strip()
            pth = posixpath.join(purelib, PTH_NAME)
            put_atomic(conn, (facts.base.purelib + "\n").encode(), pth)
        elif action.kind == "install-engine":
            conn.run(
                f"{q(python)} -m pip install {PIP_FLAGS} {q(wanted.requirement)}",
                deadline=ENGINE_INSTALL_DEADLINE_S,
            )
        elif action.kind == "push-wheel":
            put_atomic(conn, wanted.wheel.path, wanted.remote_wheel)
        elif action.kind == "install-wheel":
            _install_wheel(conn, wanted)


def _install_wheel(conn: SshConnection, wanted: VenvWanted) -> None:
    q = shlex.quote
    conn.run(
        f"{q(wanted.python)} -m pip install {PIP_FLAGS} --no-deps --force-reinstall --no-index "
        f"--no-cache-dir --quiet {q(wanted.remote_wheel)}",
        deadline=WHEEL_INSTALL_DEADLINE_S,
    )
    marker = {
        "version": wanted.wheel.version,
        "sha256": wanted.wheel.sha256,
        "filename": wanted.wheel.filename,
        "installed_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    put_atomic(conn, json.dumps(marker).encode() + b"\n", posixpath.join(wanted.venv, MARKER))
    # older wheels are not needed once this one is in
    keep = q(posixpath.dirname(wanted.remote_wheel))
    conn.run(
        f'for d in {q(wanted.layout.wheels)}/*/; do [ "${{d%/}}" = {keep} ] || rm -rf -- "$d"; '
        "done",
        deadline=PROBE_DEADLINE_S,
    )


def ensure(conn: SshConnection, wanted: VenvWanted) -> tuple[VenvPlan, VenvFacts]:
    """Probe, plan, apply, and verify the result; returns the plan that ran and the new facts."""
    facts = probe(conn, wanted)
    venv_plan = plan(facts, wanted)
    if venv_plan.empty:
        return venv_plan, facts
    apply(conn, wanted, venv_plan, facts)
    after = probe(conn, wanted)
    check_ready(after, wanted)
    return venv_plan, after


def check_ready(facts: VenvFacts, wanted: VenvWanted) -> None:
    """Refuse a venv whose engine or dflashops is not the one this CLI expects."""
    if facts.venv_python is None:
        raise EngineVenvError(f"{wanted.venv} has no working python")
    if not wheel_matches(facts, wanted.wheel):
        raise EngineVenvError(
            f"{wanted.venv} holds dflashops {facts.venv_python.dflashops_version or 'none'} "
            f"(wheel sha256 {str((facts.marker or {}).get('sha256', '?'))[:12]}), this CLI is "
            f"{wanted.wheel.version} (sha256 {wanted.wheel.sha256[:12]})",
            hint="run launch again: it reinstalls the wheel",
        )
    if release(facts.venv_python.engine_version) != wanted.engine.version:
        raise EngineVenvError(
            f"{wanted.venv} has {wanted.engine.name} {facts.venv_python.engine_version}, "
            f"the playbook pins {wanted.engine.version}"
        )
