"""A separate small model drafting for the target (vLLM ``draft_model``, SGLang STANDALONE): the
rules of :mod:`dflashops.drafter.checks_draft_model` and
:mod:`dflashops.drafter.checks_draft_model_tokens`.

``params``: ``max_model_len`` (the context the server is started with; else the target's own
length) and ``use_heterogeneous_vocab`` (vLLM 0.25+: ids mapped between two tokenizers)."""

from __future__ import annotations

from dflashops.drafter.checks_draft_model import (
    HETEROGENEOUS_VLLM,
    engine_findings,
    length_findings,
    vocab_findings,
)
from dflashops.drafter.checks_draft_model_files import read_tokenizer_files
from dflashops.drafter.checks_draft_model_tokens import (
    added_token_findings,
    chat_template_findings,
    uncompared_findings,
    vocab_map_findings,
)
from dflashops.drafter.checks_mtp_registry import registry_findings
from dflashops.drafter.families import CheckInputs
from dflashops.drafter.keys import MISSING
from dflashops.drafter.result import CheckResult, Finding, merge_by_key
from dflashops.drafter.unchecked import no_files


def validate(inputs: CheckInputs) -> CheckResult:
    draft, target = inputs.drafter, inputs.target
    if draft is None:
        return no_files("draft_model")
    wanted = inputs.params.get("use_heterogeneous_vocab") is True
    engine = inputs.engine
    mapped = wanted and (
        engine is None
        or (engine.name == "vllm" and HETEROGENEOUS_VLLM.support(engine.version) == "yes")
    )
    findings: list[Finding] = []
    if engine is not None:
        findings += engine_findings(engine, wanted)
    if target is None:
        findings.append(_no_target())
    else:
        findings += vocab_findings(draft.config, target.text_value("vocab_size"), engine, mapped)
        findings += length_findings(
            draft.config, target.config, inputs.params.get("max_model_len", MISSING)
        )
        draft_files = read_tokenizer_files(draft.path)
        target_files = read_tokenizer_files(target.path)
        findings += vocab_map_findings(draft_files, target_files, mapped)
        findings += added_token_findings(draft.tokenizer, target.tokenizer, mapped)
        findings += chat_template_findings(draft_files, target_files, target.tokenizer)
        findings += uncompared_findings(
            draft_files, target_files, draft.tokenizer, target.tokenizer
        )
    if inputs.ref is not None:
        findings += registry_findings(draft, inputs.ref, "draft_model")
    return CheckResult.of(merge_by_key(findings), {})


def _no_target() -> Finding:
    return Finding(
        "info",
        "target",
        "the target model's folder",
        "(none given)",
        "A draft model is judged against its target (vocabulary, tokenizer, context): without "
        "--target only the engine and the reference entry were checked.",
        "draft_model",
    )
