"""``tune NAME --load 1,4,16``: k per concurrency level, served as vLLM's batch-size schedule,
verified before it is kept.

The loop is pure over two injected steps, as the concurrency-1 tuner's (:mod:`.live`):

    launch(served)  -> serve one k (0: speculation off) or a schedule, wait until ready
    measure(served) -> bench every level; one :class:`LevelRun` per level, and the report

It launches what :class:`~.load_plan.LoadTunePlan` asks for within the budget, decides
(:func:`~.load_schedule.decide`: a schedule where the engine has it, else one k, and why), and
when a schedule is to be served, launches it once more and benches every level: a level more
than 5 % below the best static k measured there refuses it (:func:`~.load_verdict.judge_schedule`).
:func:`live_load_tune` wires the real steps on one container and writes the tuned playbook.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dflashops.bench.models import BenchReport
from dflashops.bench.settings import BenchSettings
from dflashops.deployment.access import ContainerAccess, connect
from dflashops.deployment.playbooks import playbook_for_container
from dflashops.errors import TuneInputError
from dflashops.inventory.load import Inventory
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.tune.live import playbook_to_tune, set_num_speculative_tokens
from dflashops.tune.load_model import LoadResult
from dflashops.tune.load_plan import LoadTunePlan
from dflashops.tune.load_runs import LevelRun, level_runs_from_report
from dflashops.tune.load_schedule import ScheduleDecision, decide
from dflashops.tune.load_section import load_section
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.load_verdict import ScheduleVerdict, judge_schedule, refusal_fallback
from dflashops.tune.probes import ProbeBench
from dflashops.tune.request import LiveTuneRequest
from dflashops.tune.schedule import schedule_support

# vLLM's default --max-num-seqs (EngineArgs): the schedule covers batch sizes up to it
VLLM_DEFAULT_MAX_NUM_SEQS = 256
REQUESTS_PER_SLOT = 2  # a level runs at least this many requests per concurrent slot

# one served configuration: a k (0: speculation off) or a schedule [[start, end, k], ...]
Served = int | list[list[int]]
Launch = Callable[[Served], None]
Measure = Callable[[Served], list[LevelRun]]


@dataclass
class LoadTuneOutcome:
    """What the loop measured and decided."""

    runs: list[LevelRun]
    launches: list[Served]  # in order: each probe's k, the schedule verified, what is kept
    result: LoadResult
    decision: ScheduleDecision
    verify_runs: list[LevelRun] = field(default_factory=list)
    verdict: ScheduleVerdict | None = None

    @property
    def kept_k(self) -> int:
        return self.verdict.k if self.verdict is not None else self.decision.k

    @property
    def kept_schedule(self) -> list[list[int]] | None:
        if self.verdict is not None:
            return self.verdict.schedule
        return self.decision.schedule.as_vllm() if self.decision.kind == "schedule" else None

    @property
    def sentence(self) -> str:
        return self.verdict.sentence if self.verdict is not None else self.decision.sentence

    def section(self) -> dict[str, object]:
        return load_section(
            self.result,
            self.decision,
            self.runs,
            verify_runs=self.verify_runs,
            verdict=self.verdict,
        )


def run_load_tune(
    plan: LoadTunePlan,
    launch_step: Launch,
    measure: Measure,
    tell: Say,
    *,
    engine: str,
    version: str,
    max_num_seqs: int,
) -> LoadTuneOutcome:
    """The loop (module doc): at most ``plan.budget`` launches of one k, one of the schedule
    when one is to be served, and one of what is kept when the server runs something else."""
    runs: list[LevelRun] = []
    launches: list[Served] = []
    while (probe := plan.next_probe(runs)) is not None:
        tell(f"k={probe.k} at every level ({probe.reason})")
        launch_step(probe.k)
        launches.append(probe.k)
        runs += measure(probe.k)
    result = plan.recommend(runs)
    decision = decide(result, schedule_support(engine, version), max_num_seqs)
    outcome = LoadTuneOutcome(runs, launches, result, decision)
    tell(decision.sentence)
    if not decision.needs_verification:
        return _serve_kept(outcome, launch_step, plan.current_k, launches[-1] if launches else None)
    schedule = decision.schedule.as_vllm()
    tell(f"verifying the schedule {schedule} at every level")
    launch_step(schedule)
    launches.append(schedule)
    outcome.verify_runs = measure(schedule)
    fallback_k, fallback_why = refusal_fallback(result, plan.current_k)
    outcome.verdict = judge_schedule(
        decision,
        runs,
        outcome.verify_runs,
        old_k=plan.current_k,
        fallback_k=fallback_k,
        fallback_why=fallback_why,
    )
    tell(outcome.verdict.sentence)
    return _serve_kept(outcome, launch_step, plan.current_k, schedule)


def _serve_kept(
    outcome: LoadTuneOutcome, launch_step: Launch, current_k: int, last: Served | None
) -> LoadTuneOutcome:
    """Leave the server on what the tuned playbook will say (state on disk = what runs): the
    kept schedule or k; "off" keeps the playbook's k (the sentence says to turn it off)."""
    kept = outcome.kept_schedule or outcome.kept_k or current_k
    if kept != last:
        launch_step(kept)
        outcome.launches.append(kept)
    return outcome


def served_playbook(book: Playbook, served: Served) -> Playbook:
    """``book`` serving one k (0: speculation off) or a schedule (k = its largest)."""
    server, drafter = book.server, book.drafter
    if isinstance(served, list):
        k = max(entry[2] for entry in served)
        schedule = [(start, end, k_) for start, end, k_ in served]
        update = {"num_speculative_tokens": k, "speculative_schedule": schedule}
        return book.model_copy(update={"server": server.model_copy(update=update)})
    if served == 0:
        off = drafter.model_copy(update={"method": "none", "model": None, "ref": None})
        plain = server.model_copy(
            update={"num_speculative_tokens": None, "speculative_schedule": None}
        )
        return book.model_copy(update={"drafter": off, "server": plain})
    update = {"num_speculative_tokens": served, "speculative_schedule": None}
    return book.model_copy(update={"server": server.model_copy(update=update)})


def max_num_seqs(book: Playbook) -> int:
    """The server's ``--max-num-seqs`` (its extra_args), else vLLM's default."""
    args = book.server.args_for(book.engine.name)
    for i, arg in enumerate(args):
        if arg.startswith("--max-num-seqs="):
            return int(arg.partition("=")[2])
        if arg == "--max-num-seqs" and i + 1 < len(args):
            return int(args[i + 1])
    return VLLM_DEFAULT_MAX_NUM_SEQS


# the key's line and, for a block-style list, its "- [...]" items below it
_SCHEDULE_LINE = re.compile(
    r"^(?P<lead>[ \t]*)speculative_schedule:[^\n]*\n(?:(?P=lead)[ \t]*-[^\n]*\n)*", re.M
)
_TUNE_COMMENT = re.compile(r"^[ \t]*# tune --load [^\n]*\n", re.M)


def set_speculative_schedule(text: str, k: int, schedule: list[list[int]] | None, note: str) -> str:
    """The playbook text with k, the schedule (None: none) and one comment saying why, each a
    line edit so the file's own comments and layout stay (the k line must be there)."""
    text = _TUNE_COMMENT.sub("", _SCHEDULE_LINE.sub("", text))
    text = set_num_speculative_tokens(text, k)
    match = re.search(r"^(?P<lead>[ \t]*)num_speculative_tokens:[^\n]*\n", text, re.M)
    if match is None:
        raise TuneInputError("the playbook has no num_speculative_tokens line", field="playbook")
    lead = match.group("lead")
    lines = f"{lead}{note}\n"
    if schedule is not None:
        lines += f"{lead}speculative_schedule: {schedule}\n"
    return text[: match.start()] + lines + text[match.start() :]


@dataclass
class LiveLoadReport:
    outcome: LoadTuneOutcome
    reports: list[BenchReport]
    playbook_path: Path
    tuned_text: str
    bench_files: list[Path]

    @property
    def report(self) -> BenchReport:
        """The last bench (the schedule's verification, else the last k), carrying the load
        section (``tune.json``; ``report`` plots it)."""
        return self.reports[-1].model_copy(update={"tune": {"load": self.outcome.section()}})


def load_asked(request: LiveTuneRequest) -> bool:
    """``--load``, or the playbook's ``tune.load``: tune k per level, not at concurrency 1."""
    if request.load:
        return True
    book = load_playbook(playbook_for_container(request.container, request.playbook))
    return bool(book.tune.load)


def live_load_tune(
    inventory: Inventory,
    request: LiveTuneRequest,
    *,
    say: Say | None = None,
    access: ContainerAccess | None = None,
) -> LiveLoadReport:
    """``tune NAME --load``: the loop against the container's real server; the tuned playbook
    text is returned (and written back unless ``request.write_playbook`` is False)."""
    tell = say or quiet
    path, book, current_k = playbook_to_tune(request)
    settings = LoadSettings.from_playbook(
        book.tune,
        levels=request.load,
        k_min=request.k_min,
        k_max=request.k_max,
        tpot_slo_ms=request.tpot_slo_ms,
    )
    plan = LoadTunePlan(
        settings=settings,
        budget=request.budget if request.budget is not None else book.tune.budget,
        current_k=current_k,
    )
    with ExitStack() as stack:
        if access is None:
            access = connect(inventory, request.container)
            stack.enter_context(access)
        steps = _LoadSteps(
            inventory, request, book=book, say=tell, access=access, levels=settings.levels
        )
        outcome = run_load_tune(
            plan,
            steps.launch_served,
            steps.measure,
            tell,
            engine=book.engine.name,
            version=book.engine.version,
            max_num_seqs=max_num_seqs(book),
        )
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    sentence = " ".join(outcome.sentence.split())
    if not outcome.kept_k:  # off wins: the drafter stays, and the comment says what to do
        sentence += f"; k={current_k} kept: set drafter.method: none to serve without it"
    note = f"# tune --load {when}: {sentence}"
    text = set_speculative_schedule(
        path.read_text(encoding="utf-8"), outcome.kept_k or current_k, outcome.kept_schedule, note
    )
    if request.write_playbook:
        path.write_text(text, encoding="utf-8")
    return LiveLoadReport(outcome, steps.reports, path, text, steps.files)


class _LoadSteps(ProbeBench):
    """The real ``launch(served)`` and ``measure(served)`` on one container, at every level."""

    def __init__(
        self,
        inventory: Inventory,
        request: LiveTuneRequest,
        *,
        book: Playbook,
        say: Say,
        access: ContainerAccess,
        levels: Sequence[int],
    ) -> None:
        requests = max(request.requests or book.bench.requests, REQUESTS_PER_SLOT * max(levels))
        settings = BenchSettings.from_playbook(book, concurrency=tuple(levels), requests=requests)
        super().__init__(inventory, request, settings=settings, say=say, access=access)
        self.book = book

    def launch_served(self, served: Served) -> None:
        self.launch(served_playbook(self.book, served))

    def measure(self, served: Served) -> list[LevelRun]:
        container = self.request.container
        name = "schedule" if isinstance(served, list) else f"k{served}"
        report, origin = self.bench(
            served_playbook(self.book, served),
            f"{container} {'schedule' if isinstance(served, list) else f'k={served}'}",
            f"tune-load-{container}-{len(self.reports) + 1}-{name}",
        )
        return level_runs_from_report(report, origin)
