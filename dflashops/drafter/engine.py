"""Which engine version does what with a DFlash, DFlash2 or DSpark drafter (``--engine vllm==X``
/ ``sglang==X``).

Facts read from the vLLM sdists and wheels and the SGLang wheels of each version named below.
Versions compare on their numeric release part only (``0.26.0rc1`` counts as 0.26.0).

- DFlash: vLLM from 0.20.0, SGLang from 0.5.11 (the first releases with the method).
- DFlash2: vLLM's model registry maps ``DFlash2DraftModel`` to ``qwen3_dflash2`` from 0.28.0
  (absent in 0.27.1); SGLang's ``models/dflash.py`` lists ``DFlash2DraftModel`` in its
  ``EntryClass`` from 0.5.19 (absent in 0.5.18). Both serve it with the ``dflash`` method.
  llama.cpp loads it since ggml-org/llama.cpp#27342 (``dflash.selector_top_k`` > 0 in the GGUF).
- DSpark: vLLM has the ``dspark`` method and ``Qwen3DSparkModel`` from 0.25.0 (absent in 0.24.0);
  SGLang has the DSPARK algorithm and ``Qwen3DSparkModel`` from 0.5.16, ``DSparkDraftModel`` from
  0.5.17 and reads a top-level ``mask_token_id`` from 0.5.18 (``parse_dflash_draft_config``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from dflashops.drafter.engine_causality import sglang_causality, vllm_causality
from dflashops.drafter.family_names import Family
from dflashops.drafter.result import Finding, engine_finding
from dflashops.errors import DrafterError
from dflashops.playbook.engine_methods import (  # the one table of first releases per method
    SGLANG_FIRST_DFLASH,
    SGLANG_FIRST_DSPARK,
    VLLM_FIRST_DFLASH,
    VLLM_FIRST_DSPARK,
)

EngineName = Literal["vllm", "sglang"]
Version = tuple[int, int, int]

V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"

_SPEC = re.compile(r"^\s*(vllm|sglang)\s*==\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?([.+\-a-z0-9]*)\s*$")

VLLM_LAYER_ID_FIX: Version = (0, 22, 0)
VLLM_READS_LAYER_TYPES: Version = (0, 25, 0)
VLLM_MIXED_ON_V2: Version = (0, 26, 0)
VLLM_MIXED_ANY_RUNNER: Version = (0, 34, 0)
MIXED_OK = f"vllm>=0.26.0 (with {V2_RUNNER_ENV}=1 before 0.34)"

VLLM_FIRST_DFLASH2: Version = (0, 28, 0)
SGLANG_FIRST_DFLASH2: Version = (0, 5, 19)
SGLANG_LAYER_BOUND_READ: Version = (0, 5, 15)
# the info finding that tells launch to serve SGLang a z-lab view of a speculators-layout drafter
ZLAB_VIEW_KEY = "engine.layout"
DFLASH2_RUNS = "vllm>=0.28.0 or sglang>=0.5.19 (llama.cpp: since ggml-org/llama.cpp#27342)"

VLLM_DSPARK_QWEN3_REWRITE: Version = (0, 34, 0)
SGLANG_DSPARK_DRAFT_CLASS: Version = (0, 5, 17)
SGLANG_TOP_LEVEL_MASK: Version = (0, 5, 18)
DSPARK_RUNS = "vllm>=0.25.0 or sglang>=0.5.16"
# the standalone DSpark classes vLLM builds (registry.py); any other name under method "dspark"
# is taken for DeepSeek-V4's own DSpark stages (config/speculative.py rewrites it)
VLLM_DSPARK_CLASSES = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel"})
DSPARK_DRAFT_CLASS = "DSparkDraftModel"


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
    """The facts about a drafter that engine versions treat differently.

    ``architectures`` and ``model_type`` are the file's own (DSpark's class depends on both in
    vLLM; a speculators file's ``model_type`` is its layer config's); ``mask_top_level`` says
    the mask id sits only at the top level, where SGLang before 0.5.18 does not look;
    ``speculators``: the file is in the speculators layout, which SGLang cannot read as it is."""

    has_sliding: bool = False
    has_full: bool = True
    sample_from_anchor: bool = False
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    mask_top_level: bool = False
    speculators: bool = False
    # a speculators file's sliding_window_non_causal (None: absent), which decides how causal
    # each engine runs its layers (engine_causality)
    speculators_non_causal: bool | None = None
    # SGLang bounds target_layer_ids by num_target_layers, else by the drafter's own layer count
    target_layer_ids: tuple[int, ...] = ()
    layers: int | None = None
    num_target_layers: int | None = None


def engine_findings(
    engine: EngineSpec, shape: DrafterShape, family: Family = "dflash"
) -> tuple[list[Finding], dict[str, str]]:
    """Findings for running this drafter of ``family`` on ``engine``, and the environment it
    requires. DFlash2 and DSpark drafters share DFlash's attention code, so its rules follow
    theirs once the engine version can run the family at all."""
    floor = _family_floor(engine, shape, family)
    if floor is not None:
        return [floor], {}
    if family == "dspark":
        found, env = _dspark(engine, shape)
        return found, env
    if engine.name == "sglang":
        return _sglang(engine, shape), {}
    return _vllm(engine, shape)


def _family_floor(engine: EngineSpec, shape: DrafterShape, family: Family) -> Finding | None:
    """An engine version that cannot build the family's drafter at all, naming what can."""
    v, found = engine.version, str(engine)
    if family == "dflash2":
        first = VLLM_FIRST_DFLASH2 if engine.name == "vllm" else SGLANG_FIRST_DFLASH2
        if v >= first:
            return None
        where = (
            "vLLM's model registry has no DFlash2DraftModel before 0.28.0"
            if engine.name == "vllm"
            else "SGLang's DFlash model classes have no DFlash2DraftModel before 0.5.19"
        )
        return engine_finding(
            "error",
            "engine",
            DFLASH2_RUNS,
            found,
            f"{where}: the server refuses the architecture and does not start. A DFlash2 "
            "drafter (its candidate selector and dynamic convolutions) runs on "
            f"{DFLASH2_RUNS}.",
        )
    if family == "dspark":
        first = VLLM_FIRST_DSPARK if engine.name == "vllm" else SGLANG_FIRST_DSPARK
        if v >= first:
            return None
        what = 'no "dspark" speculative method' if engine.name == "vllm" else "no DSPARK algorithm"
        return engine_finding(
            "error",
            "engine",
            DSPARK_RUNS,
            found,
            f"{found} has {what}: the server refuses the speculative config. DSpark drafters "
            f"run on {DSPARK_RUNS}.",
        )
    return None


def _vllm(engine: EngineSpec, shape: DrafterShape) -> tuple[list[Finding], dict[str, str]]:
    v, found = engine.version, str(engine)
    if v < VLLM_FIRST_DFLASH:
        return [
            engine_finding(
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
            engine_finding(
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
            engine_finding(
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
            engine_finding(
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
            engine_finding(
                "info",
                "engine.layer_types",
                f"{V2_RUNNER_ENV}=1",
                found,
                "vLLM 0.26-0.33 run mixed sliding/full DFlash drafters only on the V2 model "
                "runner; without the variable the server stops with NotImplementedError. "
                "dflashops launch sets it (required_env).",
            )
        )
    if shape.speculators:
        causality = vllm_causality(
            v,
            has_sliding=shape.has_sliding,
            has_full=shape.has_full,
            non_causal_key=shape.speculators_non_causal,
        )
        out += [causality] if causality else []
    if shape.sample_from_anchor and v >= VLLM_MIXED_ANY_RUNNER:
        out.append(
            engine_finding(
                "error",
                "engine.sample_from_anchor",
                "false (or absent)",
                "true",
                "vLLM 0.34 rejects sample_from_anchor=true for dflash: the server does not start.",
            )
        )
    return out, env


def _sglang(engine: EngineSpec, shape: DrafterShape) -> list[Finding]:
    if engine.version >= SGLANG_FIRST_DFLASH:
        if not shape.model_type:
            return [_sglang_needs_model_type(engine)]
        if shape.speculators:  # the view dflashops writes carries the target's layer count
            causality = sglang_causality(
                has_sliding=shape.has_sliding, non_causal_key=shape.speculators_non_causal
            )
            return [_sglang_reads_a_zlab_view(engine), *([causality] if causality else [])]
        bound = _sglang_layer_bound(engine, shape)
        return [bound] if bound else []
    return [
        engine_finding(
            "error",
            "engine",
            "sglang>=0.5.11",
            str(engine),
            "SGLang before 0.5.11 has no DFLASH speculative algorithm: nothing is drafted.",
        )
    ]


def _sglang_layer_bound(engine: EngineSpec, shape: DrafterShape) -> Finding | None:
    """SGLang's DFlashDraftModel refuses ids at or past num_target_layers, which defaults to the
    drafter's own layer count (read in 0.5.15's and 0.5.16's models/dflash.py; a real 0.5.16
    stopped a 1-layer drafter fed target layers 0-2: "out-of-range layer id")."""
    if shape.num_target_layers is not None or shape.layers is None or not shape.target_layer_ids:
        return None
    if max(shape.target_layer_ids) < shape.layers:
        return None
    read = engine.version >= SGLANG_LAYER_BOUND_READ
    return engine_finding(
        "error" if read else "warning",
        "dflash_config.num_target_layers",
        "the target's num_hidden_layers",
        f"(missing): {engine} bounds target_layer_ids {list(shape.target_layer_ids)} by the "
        f"drafter's own {shape.layers} layers",
        f"{engine} builds the drafter with target_layer_ids checked against "
        "dflash_config.num_target_layers, or the drafter's num_hidden_layers when it is absent; "
        "an id at or past that bound stops the server (ValueError 'DFLASH target_layer_ids "
        "contains an out-of-range layer id'). vLLM does not read it. "
        + ("" if read else "Read in 0.5.15 and 0.5.16 only: this release may differ."),
    )


def _sglang_needs_model_type(engine: EngineSpec) -> Finding:
    return engine_finding(
        "error",
        "model_type",
        "a model_type (z-lab's layout: qwen3 at the top level)",
        "none",
        f"{engine} loads the drafter's config.json with transformers' AutoConfig, which needs a "
        "model_type; seen on a real SGLang 0.5.16: 'ValueError: Unrecognized model in "
        "<drafter>. Should have a `model_type` key in its config.json' and the server exits.",
    )


def _sglang_reads_a_zlab_view(engine: EngineSpec) -> Finding:
    return engine_finding(
        "info",
        ZLAB_VIEW_KEY,
        "the z-lab layout (a qwen3 config at the top level, dflash_config)",
        "the speculators layout (speculators_model_type, transformer_layer_config)",
        f"{engine} loads the drafter's config.json with transformers' AutoConfig, which finds "
        "no top-level model_type in this layout (a real 0.5.16 server exited: 'Unrecognized "
        "model'). dflashops launch serves SGLang a z-lab view of it: config.json converted as "
        "vLLM converts it (target_layer_ids = aux_hidden_state_layer_ids - 1), every other file "
        "linked; the weight names are the ones SGLang's DFlashDraftModel loads. Another "
        "launcher needs the z-lab layout written out.",
    )


def _dspark(engine: EngineSpec, shape: DrafterShape) -> tuple[list[Finding], dict[str, str]]:
    """DSpark's class and mask placement per engine version, then DFlash's attention rules
    (both engines build the DSpark backbone from their DFlash drafter code)."""
    out = _dspark_class(engine, shape)
    if engine.name == "sglang":
        if shape.mask_top_level and engine.version < SGLANG_TOP_LEVEL_MASK:
            out.append(
                engine_finding(
                    "error",
                    "engine.mask_token_id",
                    "sglang>=0.5.18, or the id in dflash_config.mask_token_id",
                    str(engine),
                    "SGLang before 0.5.18 reads the mask id from dflash_config only "
                    "(parse_dflash_draft_config); a top-level mask_token_id is ignored and the "
                    "mask is looked up as the tokenizer's <|MASK|>, which a target without one "
                    "gets appended past its embeddings: the server refuses, or every masked slot "
                    "embeds another token.",
                )
            )
        return out, {}
    found, env = _vllm(engine, shape)
    return out + found, env


def _dspark_class(engine: EngineSpec, shape: DrafterShape) -> list[Finding]:
    archs = set(shape.architectures)
    if engine.name == "sglang":
        if DSPARK_DRAFT_CLASS in archs and engine.version < SGLANG_DSPARK_DRAFT_CLASS:
            return [
                engine_finding(
                    "error",
                    "engine.architectures",
                    "sglang>=0.5.17, or architectures [Qwen3DSparkModel]",
                    str(engine),
                    "SGLang 0.5.16 builds only Qwen3DSparkModel for DSpark; DSparkDraftModel is "
                    "an unknown architecture there and the server does not start.",
                )
            ]
        return []
    if archs & VLLM_DSPARK_CLASSES:
        return []
    rewritten = (
        DSPARK_DRAFT_CLASS in archs
        and shape.model_type == "qwen3"
        and engine.version >= VLLM_DSPARK_QWEN3_REWRITE
    )
    if rewritten:
        return []
    return [
        engine_finding(
            "error",
            "engine.architectures",
            '["Qwen3DSparkModel"] (vLLM 0.34 also maps DSparkDraftModel with model_type "qwen3")',
            f"{sorted(archs) or '(none)'} on {engine}",
            "vLLM serves a standalone DSpark drafter only as Qwen3DSparkModel; under method "
            '"dspark" any other class is taken for DeepSeek-V4\'s DSpark stages '
            "(config/speculative.py rewrites model_type to deepseek_v4), so the checkpoint is "
            "built as another model: it fails to load or drafts nothing useful.",
        )
    ]
