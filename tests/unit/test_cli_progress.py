"""The one progress helper (``dflashops.cli.progress``) away from a terminal: one line as each
step starts and one as it ends with its duration, written as they happen, on stderr; stdout
keeps the command's output (with ``--json``, its one document)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.progress import Progress

from dflashops.bench.models import RequestRecord
from dflashops.cli import cli
from dflashops.cli.bench import bench_progress
from dflashops.cli.progress import MAIN, LiveLanes, StepLines, lanes, spinner
from dflashops.progress import Say


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def written() -> list[str]:
    return []


@pytest.fixture
def lines(clock: Clock, written: list[str]) -> StepLines:
    return StepLines("launch lab-dflash on lab-ct1", written.append, clock=clock, heartbeat_s=30)


class Stderr:
    """What the code under test wrote to stderr (pytest's capture: a pipe, no TTY)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.seen = ""

    def getvalue(self) -> str:
        self.seen += self.capsys.readouterr().err
        return self.seen


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Stderr:
    """stderr as a pipe, UTF-8, no COLUMNS."""
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name in ("LC_ALL", "LC_CTYPE", "COLUMNS", "FORCE_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    return Stderr(capsys)


def test_each_step_starts_and_ends_with_its_duration(
    lines: StepLines, clock: Clock, written: list[str]
) -> None:
    lines.step(MAIN, "pushing 4 files")
    assert written == ["launch lab-dflash on lab-ct1: pushing 4 files"]  # at once, not at the end
    clock.now += 12.34
    lines.step(MAIN, "waiting for readiness")
    clock.now += 2
    lines.close()
    assert written == [
        "launch lab-dflash on lab-ct1: pushing 4 files",
        "launch lab-dflash on lab-ct1: pushing 4 files: done in 12.3s",
        "launch lab-dflash on lab-ct1: waiting for readiness",
        "launch lab-dflash on lab-ct1: waiting for readiness: done in 2.0s",
    ]


def test_a_step_that_raises_failed_and_an_interrupted_one_says_so(
    lines: StepLines, clock: Clock, written: list[str]
) -> None:
    lines.step(MAIN, "starting the server")
    clock.now += 3.25
    lines.close(RuntimeError("boom"))
    assert written[-1] == "launch lab-dflash on lab-ct1: starting the server: failed after 3.2s"
    lines.step(MAIN, "waiting")
    lines.close(KeyboardInterrupt())
    assert written[-1] == "launch lab-dflash on lab-ct1: waiting: interrupted after 0.0s"


def test_a_long_step_without_news_says_it_still_runs(
    lines: StepLines, clock: Clock, written: list[str]
) -> None:
    lines.step(MAIN, "waiting for readiness")
    clock.now += 29
    lines.beat()
    assert len(written) == 1
    clock.now += 1
    lines.beat()
    lines.beat()  # once per heartbeat, not per tick
    clock.now += 30
    lines.update(MAIN, "waiting for readiness (loading the weights)")
    lines.beat()
    assert written[1:] == [
        "launch lab-dflash on lab-ct1: waiting for readiness: still running after 30s",
        "launch lab-dflash on lab-ct1: waiting for readiness (loading the weights): "
        "still running after 60s",
    ]


def test_lanes_run_side_by_side_and_the_command_s_next_step_ends_them(
    clock: Clock, written: list[str]
) -> None:
    lines = StepLines("", written.append, clock=clock)
    lines.step(MAIN, "up (1 guessed config) on lab-ct1, lab-ct2")
    lines.step("ct1", "ct1 [launch] starting")
    clock.now += 1
    lines.step("ct2", "ct2 [launch] starting")
    clock.now += 1
    lines.step("ct1", "ct1 [launch] ready")  # ends ct1's step only
    clock.now += 1
    lines.step(MAIN, "stage the incident")
    assert written == [
        "up (1 guessed config) on lab-ct1, lab-ct2",
        "ct1 [launch] starting",
        "ct2 [launch] starting",
        "ct1 [launch] starting: done in 2.0s",
        "ct1 [launch] ready",
        "up (1 guessed config) on lab-ct1, lab-ct2: done in 3.0s",
        "ct2 [launch] starting: done in 2.0s",
        "ct1 [launch] ready: done in 1.0s",
        "stage the incident",
    ]


def test_spinner_in_a_pipe_writes_each_line_as_it_happens(stderr: Stderr) -> None:
    with spinner("lab models") as say:
        say("the vLLM CPU runtime (installed once)")
        assert stderr.getvalue() == "lab models: the vLLM CPU runtime (installed once)\n"
        say("the lab models (built once)")
    shown = stderr.getvalue().splitlines()
    assert shown[1].startswith("lab models: the vLLM CPU runtime (installed once): done in ")
    assert shown[2] == "lab models: the lab models (built once)"
    assert shown[3].startswith("lab models: the lab models (built once): done in ")
    assert len(shown) == 4


def test_spinner_says_which_step_failed(stderr: Stderr) -> None:
    with pytest.raises(RuntimeError), spinner("tune lab-ct1") as say:
        say("launching k=3")
        raise RuntimeError("boom")
    assert (
        stderr.getvalue().splitlines()[-1].startswith("tune lab-ct1: launching k=3: failed after ")
    )


def test_a_disabled_display_shows_nothing(stderr: Stderr) -> None:
    with spinner("launch", enabled=False) as say:
        say("pushing 4 files")
    with lanes(enabled=False) as tell:
        tell("pair", "starting")
    assert stderr.getvalue() == ""


def test_a_non_utf8_locale_gets_ascii_lines(
    stderr: Stderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANG", "C")
    with spinner("lab models") as say:
        say("decay draft: noise 0.3 → per-position [0.9, 0.5]")
    assert stderr.getvalue().splitlines()[0] == (
        "lab models: decay draft: noise 0.3 -> per-position [0.9, 0.5]"
    )


def test_on_a_terminal_each_lane_is_a_live_line() -> None:
    progress = Progress(console=Console(file=io.StringIO()), auto_refresh=False)
    live = LiveLanes(progress, "lab demo")
    live.tell(MAIN, "lab up")
    live.tell("ct1", "ct1 [launch] starting")
    live.tell("ct2", "ct2 [launch] starting")
    live.tell("ct1", "ct1 [launch] ready")
    assert [t.description for t in progress.tasks] == [
        "lab up",
        "ct1 [launch] ready",
        "ct2 [launch] starting",
    ]
    live.tell(MAIN, "stage the incident")
    assert [t.description for t in progress.tasks] == ["stage the incident"]


def record(tokens: int) -> RequestRecord:
    return RequestRecord(prompt_id="p0", success=True, start_s=0.0, output_tokens=tokens)


def test_bench_in_a_pipe_says_each_phase_and_level_with_its_count(stderr: Stderr) -> None:
    with bench_progress() as shown:
        shown.phase("warm-up (1 request)")
        shown.start_level(4, 2)
        shown.request_done(record(100))
        shown.request_done(record(100))
    text = stderr.getvalue().splitlines()
    assert text[0] == "bench: warm-up (1 request)"
    assert text[1].startswith("bench: warm-up (1 request): done in ")
    assert text[2] == "bench: concurrency 4: 2 requests"
    assert text[3].startswith("bench: concurrency 4: 2/2 requests, ")
    assert " tok/s: done in " in text[3]
    assert len(text) == 4


def fake_runtime(progress: Say | None = None, **_: Any) -> Any:
    assert progress is not None
    progress("installing vllm (about 3 minutes, 3.5 GB)")
    return type("Runtime", (), {"venv": Path("/venv"), "vllm_version": "0.9.2"})()


def fake_models(_runtime: Any, out: Path | None, **options: Any) -> tuple[Any, bool]:
    options["progress"]("training the target (Qwen3, 4 layers) on the corpus")
    names = ("root", "target", "dflash", "draft_identical", "draft_decay", "prompts", "acceptance")
    return type("Models", (), {name: Path(f"/models/{name}") for name in names})(), True


@pytest.fixture
def no_lab(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr("dflashops.lab.runtime.ensure_runtime", fake_runtime)
    monkeypatch.setattr("dflashops.lab.models.ensure.ensure_lab_models", fake_models)
    yield


@pytest.mark.usefixtures("no_lab")
def test_lab_models_json_keeps_stdout_one_document_and_shows_progress_on_stderr() -> None:
    result = CliRunner().invoke(cli, ["lab", "models", "--json"], env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runtime"] == {"venv": "/venv", "vllm": "0.9.2"}
    shown = result.stderr.splitlines()
    assert shown[0] == "lab models: the vLLM CPU runtime (installed once)"
    assert "lab models: installing vllm (about 3 minutes, 3.5 GB)" in shown
    assert "lab models: training the target (Qwen3, 4 layers) on the corpus" in shown
    assert shown[-1].startswith(
        "lab models: training the target (Qwen3, 4 layers) on the corpus: done in "
    )


def test_lab_demo_json_shows_each_pair_as_its_own_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    from dflashops.lab.demo import DemoReport
    from dflashops.up.runner import RESULT

    def fake_demo(progress: Say, pair_progress: Any) -> DemoReport:
        progress("up (1 guessed config) on lab-ct1, lab-ct2")
        pair_progress("ct1", "drafter", "starting")
        pair_progress("ct2", "drafter", "starting")
        pair_progress("ct2", "drafter", "failed: cannot read the drafter")
        pair_progress("ct2", RESULT, "ct2: drafter failed: cannot read the drafter")
        return DemoReport(model="lab")

    monkeypatch.setattr("dflashops.lab.demo.run_demo", fake_demo)
    result = CliRunner().invoke(cli, ["lab", "demo", "--json"], env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == "lab"
    shown = result.stderr.splitlines()
    assert shown[:3] == [
        "lab demo: up (1 guessed config) on lab-ct1, lab-ct2",
        "lab demo: ct1 [drafter] starting",
        "lab demo: ct2 [drafter] starting",
    ]
    # a failure and the pair's result end its lane: said once, never "still running"
    assert shown[3].startswith("lab demo: ct2 [drafter] starting: done in ")
    assert shown[4:6] == [
        "lab demo: ct2 [drafter] failed: cannot read the drafter",
        "lab demo: ct2: drafter failed: cannot read the drafter",
    ]
    assert len(shown) == 8 and all(": done in " in line for line in shown[6:])


def test_a_step_said_again_with_new_numbers_is_one_step(
    lines: StepLines, clock: Clock, written: list[str]
) -> None:
    """Readiness polls every second: in a pipe its step is two lines, not two a second."""
    for second in range(1, 40):
        lines.step(MAIN, f"loading the model ({second}s) | INFO weights {second}%")
        clock.now += 1
    lines.step(MAIN, "healthy, waiting for tiny in /v1/models (40s)")
    lines.close()
    prefix = "launch lab-dflash on lab-ct1: "
    assert written == [
        prefix + "loading the model (1s) | INFO weights 1%",
        prefix + "loading the model (39s) | INFO weights 39%: done in 39.0s",
        prefix + "healthy, waiting for tiny in /v1/models (40s)",
        prefix + "healthy, waiting for tiny in /v1/models (40s): done in 0.0s",
    ]
