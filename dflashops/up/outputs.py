"""What each step of ``up`` hands to the steps after it, typed.

A step returns one of these; the runner keeps it in the pair's record (``record.json``: the
model's JSON), so a step that a later run skips still feeds the steps after it, read back as
the same type (:meth:`StepOutput.read`). Within one run the live values go further: the drafter
step's judgement reaches ``launch`` as is (:attr:`dflashops.up.steps.PairWork.judgement`).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from dflashops.up.record import PairRecord, UpError

Output = TypeVar("Output", bound="StepOutput")


class StepOutput(BaseModel):
    """One step's output; ``step`` names the step that records it."""

    model_config = ConfigDict(extra="forbid")
    step: ClassVar[str]

    def to_record(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def read(cls: type[Output], record: PairRecord) -> Output:
        """The output the record keeps for this step (its last success), or :class:`UpError`."""
        done = record.step(cls.step)
        if done is None or done.status != "ok":
            raise UpError(f"{record.pair}: the {cls.step} step has not succeeded")
        try:
            return cls.model_validate(done.outputs)
        except ValidationError as exc:
            raise UpError(
                f"{record.pair}: the {cls.step} step's record is not what this version reads "
                f"({exc.error_count()} problem(s))",
                hint=f"rerun it: dflashops up PLAYBOOK --from {cls.step}",
            ) from None

    @classmethod
    def find(cls: type[Output], record: PairRecord) -> Output | None:
        """Like :meth:`read`, None where the step did not succeed or records something else."""
        try:
            return cls.read(record)
        except UpError:
            return None


class ProvisionOutput(StepOutput):
    step = "provision"
    action: str
    vmid: int | None = None


class DrafterOutput(StepOutput):
    step = "drafter"
    status: str = "not run"  # clean | warnings | errors | not run
    findings: list[str] = []
    pushed_keys: list[str] | None = None  # --fix-drafter: the keys written (None: not asked)


class LaunchOutput(StepOutput):
    step = "launch"
    action: str
    endpoint: str
    forced: bool = False
    findings: list[str] = []
    k: int | None = None


class SpecDecodeCounts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_drafts: int | None  # vLLM V0 has no drafts counter
    draft_tokens: int
    accepted_tokens: int


class SmokeOutput(StepOutput):
    step = "smoke"
    reply: str
    usage: dict[str, Any] = {}
    spec_decode: SpecDecodeCounts | None = None  # vLLM's counters after the request


class BenchNumbers(StepOutput):
    """What the end table and the demo show of a bench: its first level (concurrency 1)."""

    step = "bench"
    k: int | None = None
    output_throughput: float | None = None
    median_tpot_ms: float | None = None
    spec_decode_acceptance_length: float | None = None
    per_position_acceptance: list[float] | None = None
    file: str | None = None  # the saved bench report

    def line(self) -> str:
        length = self.spec_decode_acceptance_length
        shown = "?" if length is None else f"{length:.2f}"
        tok_s = "?" if self.output_throughput is None else f"{self.output_throughput:.1f}"
        return f"{tok_s} tok/s, acceptance length {shown}"


class TuneOutput(BenchNumbers):
    """k* and the verify bench's numbers; ``asked`` False: the playbook asks for no tuning."""

    step = "tune"
    asked: bool = True
    best_k: int | None = None
    start_k: int | None = None
    launches: list[int] = []
    predicted_tok_s: float | None = None
    measured_tok_s: float | None = None
    start_tok_s: float | None = None
    gain: float | None = None
    report: str | None = None  # the verify bench, with its tune section
    playbook: str | None = None  # the copy of the playbook at k*
    reused: bool = False  # k* tuned by an earlier run for the same drafter and playbook
    # tune.load (k per batch size): the levels, k*(level), what is served and why
    load_levels: list[int] | None = None
    k_by_level: dict[str, int] | None = None
    schedule: list[list[int]] | None = None  # vLLM's [[start, end, k], ...], when kept
    decision: str | None = None  # schedule, single_k or off
    verdict: str | None = None
    schedule_kept: bool | None = None  # the verification's verdict (None: nothing verified)


class ReportOutput(StepOutput):
    step = "report"
    files: list[str] = []
