"""What the rules read: plain data gathered once (:mod:`.gather`), or loaded from fixtures.

Every field may be missing; a rule that needs one it lacks says "skipped" and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dflashops.bench.roofline import tp_from_argv
from dflashops.deployment.manifest import DeployedManifest
from dflashops.doctor.members import PlacementFacts
from dflashops.doctor.nvidia import GpuState
from dflashops.drafter.registry import RegistryEntry
from dflashops.launch.status import StrayProcess
from dflashops.launch.validation import DrafterValidation
from dflashops.metrics.log_models import LogSummary
from dflashops.metrics.prometheus import Scrape
from dflashops.roofline.model import RooflineSpec


@dataclass(frozen=True)
class Acceptance:
    """Spec-decode acceptance over the observed window (``/metrics`` counter deltas).

    ``decode_tok_s`` is the single-stream decode rate (1000 / mean TPOT at concurrency 1), known
    only when doctor ran its own probe; ``step_s`` the seconds per verify step it implies."""

    k: int | None
    per_position: tuple[float, ...]
    acceptance_length: float | None
    num_drafts: int
    source: str
    decode_tok_s: float | None = None
    workload: str | None = None

    @property
    def step_s(self) -> float | None:
        if not self.decode_tok_s or not self.acceptance_length:
            return None
        return self.acceptance_length / self.decode_tok_s


@dataclass(frozen=True)
class ServerCounters:
    """What ``/metrics`` says about the KV cache and the scheduler over the window."""

    kv_cache_usage: float | None = None  # fraction, the after-scrape gauge
    preemptions: int | None = None  # counter delta over the window
    requests_waiting: float | None = None
    prefix_caching: bool | None = None  # vllm:cache_config_info enable_prefix_caching


# the running-requests gauge: vLLM's, SGLang's (``dflashops.watch`` reads the same names)
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")


@dataclass(frozen=True)
class RunningBatch:
    """Requests the server ran (``vllm:num_requests_running``), sampled over the window.

    The engine picks k per step by this batch size (a schedule's ranges), so the busy samples
    (above zero) say which k the server served; an idle sample runs no step."""

    samples: tuple[float, ...]
    source: str

    @property
    def busy(self) -> tuple[float, ...]:
        return tuple(value for value in self.samples if value > 0)

    @property
    def median(self) -> float | None:
        """The median busy batch (None: idle over the whole window)."""
        busy = sorted(self.busy)
        if not busy:
            return None
        middle = len(busy) // 2
        return busy[middle] if len(busy) % 2 else (busy[middle - 1] + busy[middle]) / 2

    @classmethod
    def from_scrapes(cls, scrapes: Sequence[Scrape | None], source: str) -> RunningBatch | None:
        """Each scrape's running-requests gauge (summed over engines); None without one."""
        samples: list[float] = []
        for scrape in scrapes:
            totals = [] if scrape is None else [scrape.total(name) for name in RUNNING]
            value = next((total for total in totals if total is not None), None)
            if value is not None:
                samples.append(value)
        return cls(samples=tuple(samples), source=source) if samples else None


@dataclass(frozen=True)
class LoadModel:
    """The per-level model of the latest ``tune NAME --load`` result: its ``tune["load"]``
    section (``dflashops.tune.load_section``), and what was benchmarked with it."""

    section: dict[str, Any]
    source: str  # the result file
    engine: str | None = None
    engine_version: str | None = None
    created_at: str | None = None


@dataclass(frozen=True)
class GpuFacts:
    """``nvidia-smi`` in the container; ``p2p`` is empty with one GPU or when not read."""

    gpus: tuple[GpuState, ...]
    p2p: dict[tuple[int, int], str] = field(default_factory=dict)
    sampled_under_load: bool = False


@dataclass(frozen=True)
class DrafterFacts:
    """The drafter the server loads: its directory and its ``config.json`` as read now."""

    path: str
    config: dict[str, Any]


@dataclass(frozen=True)
class DrafterCheckFacts:
    """The playbook method's drafter check, run on the container's files now, and the
    command that shows it in full."""

    validation: DrafterValidation
    method: str
    command: str


@dataclass
class DoctorFacts:
    container: str
    manifest: DeployedManifest | None = None
    running_argv: list[str] | None = None  # None: no server process
    running_env: dict[str, str] = field(default_factory=dict)
    engine: str | None = None
    engine_version: str | None = None
    device: str = "cuda"
    speculative_config: dict[str, Any] | None = None
    entry: RegistryEntry | None = None
    drafter: DrafterFacts | None = None
    drafter_check: DrafterCheckFacts | None = None
    drafter_check_note: str = ""  # why it was not run
    workload_thinking: bool | None = None  # the playbook's bench.thinking (what clients send)
    workload_source: str = ""
    acceptance: Acceptance | None = None
    counters: ServerCounters | None = None
    log: LogSummary | None = None
    gpu: GpuFacts | None = None
    gpu_problem: str | None = None  # why nvidia-smi gave nothing
    roofline: RooflineSpec | None = None
    roofline_note: str | None = None
    tune_k_max: int | None = None
    running_batch: RunningBatch | None = None  # None: not sampled
    load_model: LoadModel | None = None  # None: no `tune NAME --load` result found
    placement: PlacementFacts | None = None  # a placement member: every member's facts
    strays: list[StrayProcess] = field(default_factory=list)  # an earlier server's leftovers
    notes: list[str] = field(default_factory=list)

    @property
    def k(self) -> int | None:
        k = (self.speculative_config or {}).get("num_speculative_tokens")
        return k if isinstance(k, int) else None

    @property
    def method(self) -> str | None:
        if self.speculative_config is None:
            return None if self.running_argv is None else "none"
        return str(self.speculative_config.get("method") or "") or None

    @property
    def tensor_parallel(self) -> int:
        return tp_from_argv(self.running_argv or (self.manifest.argv if self.manifest else [])) or 1
