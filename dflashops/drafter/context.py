"""The state one drafter check threads through its rule modules (``checks_*.py``).

Standard library only, like every module the server preflight imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dflashops.drafter.files import DrafterFiles, TargetFiles, TokenizerInfo
from dflashops.drafter.keys import MISSING, get_path, is_int, show
from dflashops.drafter.registry import RegistryEntry
from dflashops.drafter.result import Finding, Severity


@dataclass
class CheckContext:
    """Inputs of one check and the findings collected so far."""

    drafter: DrafterFiles
    target: TargetFiles | None = None
    ref: RegistryEntry | None = None
    k: int | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def cfg(self) -> Mapping[str, Any]:
        return self._cfg

    def __post_init__(self) -> None:
        # read once: every rule reads the config in the z-lab layout the engine builds
        self._cfg = self.drafter.checked_config

    def add(
        self, severity: Severity, key: str, expected: str, found: str, why: str, *, check: str
    ) -> None:
        self.findings.append(Finding(severity, key, expected, found, why, check))

    def config_int(
        self, path: str, *, missing: Severity | None, why_missing: str, minimum: int = 1
    ) -> int | None:
        """The drafter's integer at ``path``; a finding (and ``None``) when absent or invalid."""
        value = get_path(self.cfg, path)
        if value is MISSING:
            if missing is not None:
                self.add(missing, path, "an integer", "(missing)", why_missing, check="config")
            return None
        if not is_int(value) or value < minimum:
            self.add(
                "error",
                path,
                f"an integer >= {minimum}",
                show(value),
                f"Engines build the drafter from this value. {why_missing}".strip(),
                check="config",
            )
            return None
        return int(value)

    def config_int_quiet(self, key: str) -> int | None:
        """A positive integer at top-level ``key``, else ``None`` (no finding)."""
        value = self.cfg.get(key)
        return int(value) if is_int(value) and value >= 1 else None

    def target_int(self, key: str) -> int | None:
        """A target fact (``text_config`` first); a warning when the target config lacks it."""
        if self.target is None:
            return None
        value = self.target.text_value(key)
        if is_int(value) and value >= 1:
            return int(value)
        self.add(
            "warning",
            f"target.{self.target.where(key)}",
            "a positive integer",
            show(value),
            f"The target config has no usable {key}, so the drafter cannot be checked against it.",
            check="target",
        )
        return None

    def tokenizer(self) -> tuple[TokenizerInfo | None, str]:
        """The tokenizer that decides what a token id means: the target's, else the drafter's."""
        if self.target is not None and self.target.tokenizer is not None:
            return self.target.tokenizer, "target tokenizer"
        if self.drafter.tokenizer is not None:
            return self.drafter.tokenizer, "drafter's tokenizer"
        return None, ""


@dataclass(frozen=True)
class TargetFacts:
    """What the check knows about the target: its config first, else the reference entry.

    ``*_from`` say where a number came from (for messages). ``config_*`` hold only what a real
    target config said: only those are compared for equality with the drafter's own values (the
    reference's values are compared key by key by the registry check)."""

    layers: int | None = None
    layers_from: str = ""
    hidden: int | None = None
    hidden_from: str = ""
    vocab: int | None = None
    vocab_from: str = ""
    config_layers: int | None = None
    config_hidden: int | None = None
    config_vocab: int | None = None


def target_facts(ctx: CheckContext, drafter_hidden: int | None) -> TargetFacts:
    """Layer count, hidden size and vocabulary of the target, with where each came from."""
    layers, hidden, vocab = (
        ctx.target_int(k) for k in ("num_hidden_layers", "hidden_size", "vocab_size")
    )
    ref = ctx.ref.target if ctx.ref is not None else None
    ref_label = f"reference target {ref.name}" if ref is not None else ""

    def pick(*options: tuple[int | None, str]) -> tuple[int | None, str]:
        return next(((v, label) for v, label in options if v is not None), (None, ""))

    n, n_from = pick(
        (layers, "target config"),
        (ref.num_hidden_layers if ref else None, ref_label),
        (ctx.config_int_quiet("num_target_layers"), "drafter num_target_layers"),
    )
    h, h_from = pick(
        (hidden, "target hidden_size"),
        (ref.hidden_size if ref else None, f"{ref_label} hidden_size"),
        (ctx.config_int_quiet("target_hidden_size"), "drafter target_hidden_size"),
        (drafter_hidden, "drafter hidden_size"),
    )
    v, v_from = pick((vocab, "target vocab_size"), (ref.vocab_size if ref else None, ref_label))
    return TargetFacts(
        layers=n,
        layers_from=n_from,
        hidden=h,
        hidden_from=h_from,
        vocab=v,
        vocab_from=v_from,
        config_layers=layers,
        config_hidden=hidden,
        config_vocab=vocab,
    )
