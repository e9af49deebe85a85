"""What one benchmark runs: the workload, the concurrency levels, the sizes and the sampling
overrides, each either given or taken from the playbook's ``bench`` section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from dflashops.bench.workload import Workload, load_workload

if TYPE_CHECKING:
    from dflashops.playbook.models import Playbook


class BenchSettings(BaseModel):
    """What to run: workload, levels, sizes and sampling overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: Workload
    concurrency: tuple[int, ...] = Field((1,), min_length=1)
    requests: int | None = Field(None, gt=0, description="per level; default max(prompts, c)")
    warmup_requests: int = Field(1, ge=0)
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    thinking: bool | None = Field(None, description="chat_template_kwargs.enable_thinking")
    reset_prefix_cache: bool = Field(True, description="before each level, where offered")
    scrape_metrics: bool = True
    settle_timeout_s: float = Field(10.0, gt=0, description="bound on waiting for counters")
    label: str | None = None

    def requests_for(self, concurrency: int) -> int:
        return self.requests or max(len(self.workload.prompts), concurrency)

    @classmethod
    def from_playbook(
        cls,
        playbook: Playbook | None,
        *,
        workload: str | None = None,
        concurrency: Sequence[int] | None = None,
        requests: int | None = None,
        warmup_requests: int | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        ignore_eos: bool | None = None,
        thinking: bool | None = None,
        label: str | None = None,
    ) -> BenchSettings:
        """The playbook's ``bench`` section, each given value winning over it.

        Without a playbook the defaults are the built-in ones: the smoke workload (the
        reference request), concurrency 1, one warm-up, the workload's max_tokens (2000) and
        temperature (0), no ignore_eos.
        """
        bench = playbook.bench if playbook is not None else None

        def first(given: Any, from_book: Any) -> Any:
            return given if given is not None else from_book

        return cls(
            workload=load_workload(first(workload, bench.workload if bench else "smoke")),
            concurrency=tuple(first(concurrency, bench.concurrency if bench else (1,))),
            requests=first(requests, bench.requests if bench else None),
            warmup_requests=first(warmup_requests, bench.warmup_requests if bench else 1),
            max_tokens=first(max_tokens, bench.max_tokens if bench else None),
            temperature=first(temperature, bench.temperature if bench else None),
            ignore_eos=first(ignore_eos, bench.ignore_eos if bench else None),
            thinking=first(thinking, bench.thinking if bench else None),
            label=label,
        )
