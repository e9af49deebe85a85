"""Which engine version does what with a DFlash drafter (``--engine vllm==X`` / ``sglang==X``).

Facts read from the vLLM sdists and SGLang wheels of each version listed below. Versions
compare on their numeric release part only (``0.26.0rc1`` counts as 0.26.0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from dflashops.drafter.result import Finding
from dflashops.errors import DrafterError

EngineName = Literal["vllm", "sglang"]
Version = tuple[int, int, int]

V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"

_SPEC = re.compile(r"^\s*(vllm|sglang)\s*==\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?([.+\-a-z0-9]*)\s*$")

VLLM_FIRST_DFLASH: Version = (0, 20, 0)
VLLM_LAYER_ID_FIX: Version = (0, 22, 0)
VLLM_READS_LAYER_TYPES: Version = (0, 25, 0)
VLLM_MIXED_ON_V2: Version = (0, 26, 0)
VLLM_MIXED_ANY_RUNNER: Version = (0, 34, 0)
SGLANG_FIRST_DFLASH: Version = (0, 5, 11)
MIXED_OK = f"vllm>=0.26.0 (with {V2_RUNNER_ENV}=1 before 0.34)"


@dataclass(frozen=True)
class EngineSpec:
    name: EngineName
    version: Version

    def __str__(self) -> str:
        return f"{self.name}=={'.'.join(map(str, self.version))}"


def parse_engine(text: str) -> EngineSpec:
    """``vllm==0.26.0`` / ``sglang==0.5.11`` (a pre/dev suffix is ignored)."""
    match = _SPEC.match(text.lower())
    if match is None:
        raise DrafterError(
            f"engine {text[:60]!r} is not ENGINE==VERSION",
            hint="e.g. vllm==0.26.0 or sglang==0.5.11",
        )
    name: EngineName = "vllm" if match.group(1) == "vllm" else "sglang"
    major, minor, patch = (int(g) if g else 0 for g in match.group(2, 3, 4))
    return EngineSpec(name=name, version=(major, minor, patch))


@dataclass(frozen=True)
class DrafterShape:
    """The facts about a drafter that engine versions treat differently."""

    has_sliding: bool = False
    has_full: bool = True
    sample_from_anchor: bool = False


def engine_findings(
    engine: EngineSpec, shape: DrafterShape
) -> tuple[list[Finding], dict[str, str]]:
    """Findings for running this drafter on ``engine``, and the environment it requires."""
    if engine.name == "sglang":
        return _sglang(engine), {}
    return _vllm(engine, shape)


def _finding(
    severity: Literal["error", "warning", "info"], key: str, expected: str, found: str, why: str
) -> Finding:
    return Finding(
        severity=severity, key=key, expected=expected, found=found, why=why, check="engine"
    )


def _vllm(engine: EngineSpec, shape: DrafterShape) -> tuple[list[Finding], dict[str, str]]:
    v, found = engine.version, str(engine)
    if v < VLLM_FIRST_DFLASH:
        return [
            _finding(
                "error",
                "engine",
                "vllm>=0.20.0",
                found,
                'vLLM before 0.20.0 has no "dflash" speculative method: the server refuses the '
                "speculative config, so nothing is drafted at all.",
            )
        ], {}
    out: list[Finding] = []
    env: dict[str, str] = {}
    if v < VLLM_LAYER_ID_FIX:
        out.append(
            _finding(
                "warning",
                "engine.target_layer_ids",
                "vllm>=0.22.0",
                found,
                "vLLM 0.20-0.21 capture target hidden states one layer too early (they pass "
                "target_layer_ids without the +1 that 0.22 adds), so the drafter reads features "
                "from the layer before the one it was trained on; acceptance drops.",
            )
        )
    mixed = shape.has_sliding and shape.has_full
    if shape.has_sliding and v < VLLM_READS_LAYER_TYPES:
        out.append(
            _finding(
                "error",
                "engine.layer_types",
                MIXED_OK if mixed else "vllm>=0.25.0",
                found,
                "vLLM up to 0.24 ignores layer_types without a word: every drafter layer runs as "
                "non-causal full attention, so the sliding layers attend differently from how "
                "they were trained and acceptance collapses.",
            )
        )
    elif mixed and v < VLLM_MIXED_ON_V2:
        out.append(
            _finding(
                "error",
                "engine.layer_types",
                MIXED_OK,
                found,
                "vLLM 0.25 refuses drafters that mix sliding and full attention "
                '(NotImplementedError "DFlash does not yet support mixed sliding/full '
                'attention via layer_types"): the server does not start.',
            )
        )
    elif mixed and v < VLLM_MIXED_ANY_RUNNER:
        # 0.26-0.32 were read; 0.33 is assumed to behave like 0.32 (0.34 dropped the V1 runner)
        env[V2_RUNNER_ENV] = "1"
        out.append(
            _finding(
                "info",
                "engine.layer_types",
                f"{V2_RUNNER_ENV}=1",
                found,
                "vLLM 0.26-0.33 run mixed sliding/full DFlash drafters only on the V2 model "
                "runner; without the variable the server stops with NotImplementedError. "
                "dflashops launch sets it (required_env).",
            )
        )
    if shape.sample_from_anchor and v >= VLLM_MIXED_ANY_RUNNER:
        out.append(
            _finding(
                "error",
                "engine.sample_from_anchor",
                "false (or absent)",
                "true",
                "vLLM 0.34 rejects sample_from_anchor=true for dflash: the server does not start.",
            )
        )
    return out, env


def _sglang(engine: EngineSpec) -> list[Finding]:
    if engine.version >= SGLANG_FIRST_DFLASH:
        return []
    return [
        _finding(
            "error",
            "engine",
            "sglang>=0.5.11",
            str(engine),
            "SGLang before 0.5.11 has no DFLASH speculative algorithm: nothing is drafted.",
        )
    ]
