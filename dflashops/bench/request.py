"""``dflashops bench`` as one typed request: the server to measure (a container NAME or a URL),
the settings the command line gave, the API, the roofline, and the labels to record.

Which options go together is part of the request's meaning, so the model checks it: a CLI only
turns the first error into a usage error (``pydantic_errors.first_error_line``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.bench.models import ResolvedConfig
from dflashops.bench.settings import BenchSettings
from dflashops.roofline.request import RooflineRequest

if TYPE_CHECKING:
    from dflashops.playbook.models import Playbook

# the ``resolved_from`` of a config value the operator stated
COMMAND_LINE = "command line"


class _Given(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SettingsRequest(_Given):
    """The bench settings the command line gave; None leaves the playbook's (or the default)."""

    workload: str | None = None
    concurrency: tuple[Annotated[int, Field(ge=1)], ...] | None = Field(None, min_length=1)
    requests: int | None = Field(None, ge=1)
    warmup_requests: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    thinking: bool | None = None
    label: str | None = None

    def resolve(self, playbook: Playbook | None) -> BenchSettings:
        """The settings to run: each given value over the playbook's ``bench`` section."""
        return BenchSettings.from_playbook(playbook, **self.model_dump())


class RecordedLabels(_Given):
    """What the operator says the server runs (``--method``, ``-k``): recorded in the report's
    config as stated, not checked against the server (a URL gives no way to)."""

    method: str | None = None
    num_speculative_tokens: int | None = Field(None, ge=0)

    def apply(self, config: ResolvedConfig) -> ResolvedConfig:
        """``config`` with every given label, its source the command line."""
        given: dict[str, Any] = self.model_dump(exclude_none=True)
        if not given:
            return config
        sources = {**config.resolved_from, **dict.fromkeys(given, COMMAND_LINE)}
        return config.model_copy(update={**given, "resolved_from": sources})


class BenchRequest(_Given):
    """One ``bench``: exactly one of ``container`` (inventory NAME) and ``url``."""

    container: str | None = Field(None, min_length=1)
    url: str | None = Field(None, min_length=1)
    playbook: str | None = Field(None, description="NAME or FILE; for NAME default: its own")
    model: str | None = Field(None, description="--url: the served model name")
    api: Literal["chat", "completions"] | None = Field(
        None, description="None: the playbook's bench.api, else chat"
    )
    settings: SettingsRequest = SettingsRequest()
    labels: RecordedLabels = RecordedLabels()
    api_key_env: str | None = Field(None, description="--url: the variable holding the key")
    server_log: str | None = Field(None, description="NAME: the log inside the container")
    roofline: RooflineRequest = RooflineRequest()
    no_roofline: bool = False

    @model_validator(mode="after")
    def _options_fit_the_target(self) -> BenchRequest:
        if (self.container is None) == (self.url is None):
            raise ValueError(
                "give a container NAME or --url URL, not both"
                if self.container
                else "no server: give a container NAME or --url URL"
            )
        if self.container is not None and self.api_key_env:
            raise ValueError("--api-key-env goes with --url; NAME uses server.api_key_env")
        if self.container is not None and self.model is not None:
            raise ValueError("--model goes with --url; NAME serves the model its deployment names")
        if self.url is not None and self.server_log is not None:
            raise ValueError("--server-log is for NAME: --url gives no SSH access to a log")
        self._check_roofline()
        return self

    def _check_roofline(self) -> None:
        given = self.roofline.given_options()
        if self.no_roofline and given:
            raise ValueError(f"{given[0]} describes the roofline, which --no-roofline skips")
        if self.url is None:
            return
        if self.no_roofline:
            raise ValueError("--no-roofline is for NAME: with --url there is none unless asked")
        if given and not self.roofline.names_hardware:
            raise ValueError(f"{given[0]} is for the roofline: give --gpu or --bandwidth-gbps")
        if self.roofline.names_hardware and self.roofline.weights is None:
            raise ValueError("with --url the roofline needs --weights PATH|SIZE")

    @property
    def container_roofline(self) -> RooflineRequest | None:
        """NAME: the roofline to add (the container fills in what the request does not say)."""
        return None if self.no_roofline else self.roofline
