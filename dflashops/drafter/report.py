"""The ``drafter check`` / ``drafter diff`` reports the CLI prints and saves.

Why two layers: the check itself (``validate.py`` and the readers) is standard library only,
because the bundled server preflight runs it inside an engine venv, where dflashops does not
depend on pydantic. Its results are frozen stdlib dataclasses. This module is the CLI side: pydantic
models that add what the command looked at (paths, reference, how it was matched, engine) and
give ``save()``/``load()`` like every dflashops report. Pydantic validates the stdlib dataclasses
natively, so findings have one schema, written once in ``result.py``, and a loaded report is
re-validated field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError, computed_field, model_validator

from dflashops.drafter.check import CheckRun, DiffRun
from dflashops.drafter.diff import DiffLine
from dflashops.drafter.registry import MatchedBy
from dflashops.drafter.result import CheckResult, Finding, Status, Summary
from dflashops.errors import DrafterError
from dflashops.pydantic_errors import first_error_line


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_computed(cls, data: Any) -> Any:
        """Saved reports carry the computed fields (status, exit_code); they are recomputed."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in cls.model_computed_fields}
        return data

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Self:
        try:
            return cls.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise DrafterError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except ValidationError as exc:
            line = first_error_line(exc, root="<root>")
            raise DrafterError(f"{path}: not a {cls.__name__}: {line}") from exc


class DrafterCheckReport(_Report):
    """One ``drafter check``: what was checked, against what, and the findings."""

    kind: Literal["drafter-check"] = "drafter-check"
    drafter: str
    drafter_path: str | None = None
    target: str | None = None
    target_path: str | None = None
    ref: str | None = None
    ref_matched_by: MatchedBy | None = None
    ref_detail: str | None = None
    engine: str | None = None
    k: int | None = None
    fingerprint: str | None = None
    summary: Summary
    required_env: dict[str, str]
    findings: list[Finding]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> Status:
        return self.summary.status

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        return self.summary.exit_code

    @classmethod
    def from_run(cls, run: CheckRun) -> DrafterCheckReport:
        match = run.match
        return cls(
            drafter=run.drafter.name,
            drafter_path=run.drafter.path,
            target=run.target.name if run.target else None,
            target_path=run.target.path if run.target else None,
            ref=match.entry.name if match else None,
            ref_matched_by=match.by if match else None,
            ref_detail=match.detail if match else None,
            engine=str(run.engine) if run.engine else None,
            k=run.k,
            fingerprint=run.drafter.weights.fingerprint if run.drafter.weights else None,
            summary=run.result.summary,
            required_env=dict(run.result.required_env),
            findings=list(run.result.findings),
        )

    def result(self) -> CheckResult:
        return CheckResult(
            findings=tuple(self.findings), summary=self.summary, required_env=self.required_env
        )


class DrafterDiffReport(_Report):
    """One ``drafter diff``: the differing keys, drafter value against the other side's."""

    kind: Literal["drafter-diff"] = "drafter-diff"
    drafter: str
    drafter_path: str | None = None
    against: str
    against_kind: Literal["registry", "file"]
    differences: list[DiffLine]

    @classmethod
    def from_run(cls, run: DiffRun) -> DrafterDiffReport:
        return cls(
            drafter=run.drafter.name,
            drafter_path=run.drafter.path,
            against=run.against,
            against_kind=run.kind,
            differences=run.lines,
        )
