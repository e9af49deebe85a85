"""Readiness: never declared before /health is 200, the model is listed and a 1-token
completion succeeds, all while the process lives; a death or the deadline ends the wait."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from dflashops.launch.readiness import (
    HttpProber,
    HttpView,
    Observation,
    Phase,
    ProcessView,
    Readiness,
    wait_ready,
)

MODEL = "tiny"


def obs(t: float, **kw: object) -> Observation:
    return Observation(elapsed_s=t, alive=bool(kw.pop("alive", True)), **kw)  # type: ignore[arg-type]


def test_phases_move_only_on_evidence() -> None:
    machine = Readiness(model=MODEL, timeout_s=100)
    assert machine.observe(obs(1)) is Phase.LOADING
    assert machine.observe(obs(2, health=503)) is Phase.LOADING
    assert machine.observe(obs(3, health=200)) is Phase.HEALTHY
    assert machine.observe(obs(4, health=200, models=("other",))) is Phase.HEALTHY
    assert machine.observe(obs(5, health=200, models=(MODEL,), probe_ok=False)) is Phase.LISTED
    # /health fails again (a restart inside the engine): back to loading, not ready
    assert machine.observe(obs(6, health=None)) is Phase.LOADING
    assert machine.observe(obs(7, health=200, models=(MODEL,), probe_ok=True)) is Phase.READY
    assert machine.reached[Phase.HEALTHY] == 3
    assert machine.reached[Phase.READY] == 7


@pytest.mark.parametrize(
    "observation",
    [
        obs(1, probe_ok=True),  # a probe answer without /health 200
        obs(1, health=200, probe_ok=True),  # without the model listed
        obs(1, health=200, models=("other",), probe_ok=True),  # another model
        obs(1, health=500, models=(MODEL,), probe_ok=True),
        obs(1, alive=False, health=200, models=(MODEL,), probe_ok=True),  # the process is gone
    ],
)
def test_never_ready_without_every_check(observation: Observation) -> None:
    assert Readiness(model=MODEL, timeout_s=100).observe(observation) is not Phase.READY


def test_death_and_timeout_are_final() -> None:
    machine = Readiness(model=MODEL, timeout_s=10)
    assert machine.observe(obs(1, exit_code=1)) is Phase.DIED
    assert machine.observe(obs(2, health=200, models=(MODEL,), probe_ok=True)) is Phase.DIED
    late = Readiness(model=MODEL, timeout_s=10)
    assert late.observe(obs(10, health=200, models=(MODEL,))) is Phase.TIMED_OUT
    # ready at the deadline still counts: the evidence is there
    just = Readiness(model=MODEL, timeout_s=10)
    assert just.observe(obs(10, health=200, models=(MODEL,), probe_ok=True)) is Phase.READY


def test_wait_ready_asks_http_only_while_alive_and_reports_progress() -> None:
    clock = iter(float(t) for t in range(100))
    views = iter(
        [
            ProcessView(True, log_line="Loading weights"),
            ProcessView(True, log_line="Starting API server"),
            ProcessView(True, log_line="Application startup complete"),
        ]
    )
    answers = iter(
        [HttpView(None), HttpView(200, (MODEL,), False, "503"), HttpView(200, (MODEL,), True)]
    )
    seen: list[str] = []
    result = wait_ready(
        lambda: next(views),
        lambda: next(answers),
        model=MODEL,
        timeout_s=50,
        progress=seen.append,
        clock=lambda: next(clock),
        sleep=lambda _s: None,
    )
    assert result.ready
    assert [s.split(" (")[0] for s in seen] == [
        "loading the model",
        "listed, waiting for a 1-token completion",
        "ready",
    ]
    assert "Loading weights" in seen[0]


def test_wait_ready_stops_on_death_without_http() -> None:
    calls: list[int] = []

    def http() -> HttpView:
        calls.append(1)
        return HttpView(None)

    result = wait_ready(
        lambda: ProcessView(False, exit_code=1, log_line="RuntimeError: boom"),
        http,
        model=MODEL,
        timeout_s=50,
        sleep=lambda _s: None,
    )
    assert result.phase is Phase.DIED and not calls
    assert result.last is not None and result.last.exit_code == 1


def test_wait_ready_times_out() -> None:
    ticks = iter(float(t) for t in range(0, 1000, 5))
    result = wait_ready(
        lambda: ProcessView(True),
        lambda: HttpView(200, (MODEL,), False, "completion answered 503"),
        model=MODEL,
        timeout_s=20,
        clock=lambda: next(ticks),
        sleep=lambda _s: None,
    )
    assert result.phase is Phase.TIMED_OUT
    assert result.last is not None and result.last.detail == "completion answered 503"


# --------------------------------------------------------------------------- the HTTP prober


class _Server(BaseHTTPRequestHandler):
    """/health, /v1/models and /v1/completions with switchable answers."""

    state: ClassVar[dict[str, object]] = {}

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(int(self.state["health"]), {})  # type: ignore[call-overload]
        elif self.path == "/v1/models":
            if self.headers.get("Authorization") != "Bearer k":
                self._send(401, {"error": "unauthorized"})
                return
            self._send(200, {"data": [{"id": m} for m in self.state["models"]]})  # type: ignore[attr-defined]
        else:
            self._send(404, {})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        self.state["last_body"] = body
        self._send(int(self.state["completion"]), {"choices": [{"text": "x"}]})  # type: ignore[call-overload]


@pytest.fixture
def server() -> Iterator[str]:
    _Server.state = {"health": 503, "models": [], "completion": 503}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_prober_stops_at_the_first_failing_step(server: str) -> None:
    prober = HttpProber(server, MODEL, api_key="k")
    try:
        assert prober() == HttpView(503, detail="/health answered 503")
        _Server.state["health"] = 200
        assert prober().models == ()
        _Server.state["models"] = [MODEL]
        view = prober()
        assert view.models == (MODEL,) and view.probe_ok is False
        _Server.state["completion"] = 200
        assert prober().probe_ok is True
        assert _Server.state["last_body"] == {
            "model": MODEL,
            "prompt": "Hello",
            "max_tokens": 1,
            "temperature": 0,
        }
    finally:
        prober.close()


def test_prober_without_the_key_is_not_ready(server: str) -> None:
    _Server.state.update(health=200, models=[MODEL], completion=200)
    prober = HttpProber(server, MODEL, api_key=None)
    try:
        view = prober()
        assert view.probe_ok is None and view.detail == "/v1/models: HTTP 401"
    finally:
        prober.close()


def test_prober_with_nothing_listening() -> None:
    prober = HttpProber("http://127.0.0.1:9", MODEL)
    try:
        view = prober()
        assert view.health is None and view.detail is not None
    finally:
        prober.close()
