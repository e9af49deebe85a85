"""When is a server ready? Only when ``/health`` answers 200, ``/v1/models`` lists the served
model and a 1-token completion succeeds, in that order, while its process is alive.

:class:`Readiness` is the pure state machine (fed observations, unit-tested with canned ones);
:func:`wait_ready` is the loop that makes the observations (the process over SSH, HTTP from
here) and reports progress with the server's last log line while the model loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dflashops.deployment.manifest import DeployedManifest
from dflashops.progress import Say

HEALTH_TIMEOUT_S = 3.0
PROBE_TIMEOUT_S = 60.0  # the first completion also warms the engine up
PROBE_PROMPT = "Hello"


class Phase(StrEnum):
    STARTING = "starting"  # no observation yet
    LOADING = "loading"  # the process runs, /health does not answer 200 yet
    HEALTHY = "healthy"  # /health 200, the model is not listed (yet)
    LISTED = "listed"  # the model is listed, the 1-token completion failed (yet)
    READY = "ready"
    DIED = "died"  # the process exited (or its pid vanished)
    TIMED_OUT = "timed out"

    @property
    def final(self) -> bool:
        return self in (Phase.READY, Phase.DIED, Phase.TIMED_OUT)


@dataclass(frozen=True)
class Observation:
    """One poll. ``health`` is the HTTP status (None: no answer); ``models`` None: not asked;
    ``probe_ok`` None: not tried."""

    elapsed_s: float
    alive: bool
    exit_code: int | None = None
    health: int | None = None
    models: tuple[str, ...] | None = None
    probe_ok: bool | None = None
    detail: str | None = None  # why the last HTTP step failed
    log_line: str | None = None


@dataclass
class Readiness:
    """Phases only move on evidence from the same poll: READY needs a living process, /health
    200, the model listed and a successful completion, all in one observation."""

    model: str
    timeout_s: float
    phase: Phase = Phase.STARTING
    last: Observation | None = None
    # elapsed seconds at which each phase was first entered
    reached: dict[Phase, float] = field(default_factory=dict)

    def observe(self, obs: Observation) -> Phase:
        if self.phase.final:
            return self.phase
        self.last = obs
        self._enter(self._next(obs), obs.elapsed_s)
        return self.phase

    def _next(self, obs: Observation) -> Phase:
        if not obs.alive or obs.exit_code is not None:
            return Phase.DIED
        listed = obs.health == 200 and obs.models is not None and self.model in obs.models
        if listed and obs.probe_ok:
            return Phase.READY
        if obs.elapsed_s >= self.timeout_s:
            return Phase.TIMED_OUT
        if listed:
            return Phase.LISTED
        return Phase.HEALTHY if obs.health == 200 else Phase.LOADING

    def _enter(self, phase: Phase, at: float) -> None:
        self.phase = phase
        self.reached.setdefault(phase, at)

    def describe(self) -> str:
        obs = self.last
        elapsed = f"{obs.elapsed_s:.0f}s" if obs else "0s"
        text = {
            Phase.STARTING: "starting",
            Phase.LOADING: "loading the model",
            Phase.HEALTHY: f"healthy, waiting for {self.model} in /v1/models",
            Phase.LISTED: "listed, waiting for a 1-token completion",
            Phase.READY: "ready",
            Phase.DIED: "the server exited",
            Phase.TIMED_OUT: "not ready in time",
        }[self.phase]
        line = f" | {obs.log_line[:110]}" if obs and obs.log_line else ""
        return f"{text} ({elapsed}){line}"


@dataclass(frozen=True)
class ProcessView:
    alive: bool
    exit_code: int | None = None
    log_line: str | None = None


@dataclass(frozen=True)
class HttpView:
    health: int | None
    models: tuple[str, ...] | None = None
    probe_ok: bool | None = None
    detail: str | None = None


class HttpProber:
    """The three HTTP checks, stopping at the first that fails."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=HEALTH_TIMEOUT_S)

    def close(self) -> None:
        self.client.close()

    def __call__(self) -> HttpView:
        import httpx

        try:
            health = self.client.get("/health").status_code
        except httpx.HTTPError as exc:
            return HttpView(None, detail=f"/health: {type(exc).__name__}")
        if health != 200:
            return HttpView(health, detail=f"/health answered {health}")
        try:
            response = self.client.get("/v1/models")
            response.raise_for_status()
            models = tuple(str(m.get("id")) for m in response.json().get("data", []))
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return HttpView(health, detail=f"/v1/models: {_why(exc)}")
        if self.model not in models:
            return HttpView(health, models, detail=f"/v1/models lists {list(models)}")
        ok, detail = self._complete()
        return HttpView(health, models, ok, None if ok else detail)

    def _complete(self) -> tuple[bool, str]:
        import httpx

        body: dict[str, Any] = {
            "model": self.model,
            "prompt": PROBE_PROMPT,
            "max_tokens": 1,
            "temperature": 0,
        }
        try:
            response = self.client.post("/v1/completions", json=body, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return False, f"completion: {_why(exc)}"
        if response.status_code != 200:
            return False, f"completion answered {response.status_code}"
        try:
            choices = response.json().get("choices")
        except (ValueError, AttributeError):
            return False, "completion: not JSON"
        return (bool(choices), "ok" if choices else "completion without choices")


def _why(exc: Exception) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__


@dataclass(frozen=True)
class ReadinessResult:
    phase: Phase
    elapsed_s: float
    reached: dict[Phase, float]
    last: Observation | None

    @property
    def ready(self) -> bool:
        return self.phase is Phase.READY


def wait_ready(
    process: Callable[[], ProcessView],
    http: Callable[[], HttpView],
    *,
    model: str,
    timeout_s: float,
    poll_s: float = 1.0,
    progress: Say | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReadinessResult:
    """Poll until ready, dead or ``timeout_s``; HTTP is asked only while the process lives."""
    machine = Readiness(model=model, timeout_s=timeout_s)
    started = clock()
    while True:
        view = process()
        living = view.alive and view.exit_code is None
        answer = http() if living else HttpView(None)
        obs = Observation(
            elapsed_s=clock() - started,
            alive=view.alive,
            exit_code=view.exit_code,
            health=answer.health,
            models=answer.models,
            probe_ok=answer.probe_ok,
            detail=answer.detail,
            log_line=view.log_line,
        )
        phase = machine.observe(obs)
        if progress is not None:
            progress(machine.describe())
        if phase.final:
            return ReadinessResult(phase, obs.elapsed_s, dict(machine.reached), obs)
        sleep(poll_s)


def serve_wait(
    process: Callable[[], ProcessView],
    endpoint: str,
    model: str,
    api_key: str | None,
    *,
    timeout_s: float,
    progress: Say | None = None,
) -> ReadinessResult:
    """:func:`wait_ready` against the OpenAI ``endpoint`` (``…/v1``) of a started server."""
    prober = HttpProber(endpoint.removesuffix("/v1"), model, api_key)
    try:
        return wait_ready(process, prober, model=model, timeout_s=timeout_s, progress=progress)
    finally:
        prober.close()


def deployed_wait(
    process: Callable[[], ProcessView],
    manifest: DeployedManifest,
    api_key: str | None,
    *,
    timeout_s: float,
    progress: Say | None = None,
) -> ReadinessResult:
    """:func:`serve_wait` for the server a manifest describes (its endpoint and model)."""
    return serve_wait(
        process,
        manifest.endpoint,
        manifest.served_model_name,
        api_key,
        timeout_s=timeout_s,
        progress=progress,
    )
