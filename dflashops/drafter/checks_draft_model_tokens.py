"""A draft model's tokenizer against the target's: the classic draft-model failure.

The engine tokenizes with the target's tokenizer only and hands the draft those ids: vLLM builds
the draft's ``ModelConfig`` with ``tokenizer=target_model_config.tokenizer`` (
``vllm/config/speculative.py``, 0.15-0.34, unless ``use_heterogeneous_vocab``), and SGLang's
STANDALONE worker shares the target's tokenizer. So an id must mean the same token to both
models; the same vocabulary *size* is not enough (a draft of another family can have it). What
only shapes the draft's training (how text is split, the chat template) costs acceptance but
breaks nothing. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

from dflashops.drafter.checks_draft_model_files import TokenizerFiles
from dflashops.drafter.files import TokenizerInfo
from dflashops.drafter.result import Finding, Severity

SAME_IDS = (
    "The engine tokenizes with the target's tokenizer and feeds the draft those ids "
    "(vllm/config/speculative.py: the draft's ModelConfig takes the target's tokenizer); "
)
EXAMPLES = 3


def _finding(severity: Severity, key: str, expected: str, found: str, why: str) -> Finding:
    return Finding(severity, key, expected, found, why, "tokenizer")


def vocab_map_findings(
    draft: TokenizerFiles, target: TokenizerFiles, mapped: bool
) -> list[Finding]:
    """``tokenizer.json``'s id map and splitting, and the slow-tokenizer files, compared."""
    out: list[Finding] = []
    severity: Severity = "info" if mapped else "error"
    if draft.vocab is not None and target.vocab is not None:
        differ = _differing_ids(draft.vocab, target.vocab)
        if differ:
            out.append(
                _finding(
                    severity,
                    "tokenizer.json:model.vocab",
                    "the target's id -> token map",
                    f"{len(differ)} ids differ, e.g. {'; '.join(differ[:EXAMPLES])}",
                    SAME_IDS + "where the draft reads another token the draft predicts noise and "
                    "nearly every draft is rejected."
                    + (" use_heterogeneous_vocab maps the ids (vLLM 0.25+)." if mapped else ""),
                )
            )
        elif draft.splitting != target.splitting:
            out.append(_splitting("tokenizer.json:model"))
    for name in sorted(draft.raw.keys() & target.raw.keys()):
        if draft.raw[name] == target.raw[name]:
            continue
        if name == "merges.txt":
            out.append(_splitting(name))
            continue
        out.append(
            _finding(
                "warning" if name.endswith(".model") or mapped else "error",
                name,
                "the target's file (same bytes)",
                "different bytes",
                SAME_IDS + f"this {name} differs from the target's, so some ids likely mean "
                "other tokens to the draft"
                + (
                    " (a sentencepiece/tiktoken model is compared as bytes only)."
                    if name.endswith(".model")
                    else "."
                ),
            )
        )
    return out


def _differing_ids(draft: Mapping[str, int], target: Mapping[str, int]) -> list[str]:
    draft_by_id = {i: t for t, i in draft.items()}
    differ = []
    for token, i in sorted(target.items(), key=lambda item: item[1]):
        mine = draft_by_id.get(i)
        if mine != token:
            differ.append(f"id {i}: target {token!r}, draft {mine!r}")
    return differ


def _splitting(key: str) -> Finding:
    return _finding(
        "warning",
        key,
        "the target's merges, pre-tokenizer and normalizer",
        "different ones (same id map)",
        "The ids mean the same tokens, but the draft's tokenizer splits text differently: it was "
        "trained on id sequences the target's tokenizer never produces, so it may accept less.",
    )


def added_token_findings(
    draft: TokenizerInfo | None, target: TokenizerInfo | None, mapped: bool
) -> list[Finding]:
    """Added and special tokens (``tokenizer_config.json`` / ``tokenizer.json``) by id."""
    if draft is None or target is None:
        return []
    out: list[Finding] = []
    other, absent, flags = [], [], []
    for i, token in sorted(target.added.items()):
        mine = draft.added.get(i)
        if mine is None:
            if draft.classify(i) != "ordinary":
                absent.append(f"{i} {token.content!r}")
        elif mine.content != token.content:
            other.append(f"{i}: target {token.content!r}, draft {mine.content!r}")
        elif mine.special != token.special:
            flags.append(f"{i} {token.content!r}")
    if other:
        out.append(
            _finding(
                "info" if mapped else "error",
                "tokenizer.added_tokens",
                "the target's added tokens at the same ids",
                f"{len(other)} differ, e.g. {'; '.join(other[:EXAMPLES])}",
                SAME_IDS + "the chat-format and special tokens the target emits would be other "
                "tokens to the draft: it drafts noise after each of them.",
            )
        )
    if absent:
        out.append(
            _finding(
                "warning",
                "tokenizer.added_tokens",
                "the target's added tokens",
                f"{len(absent)} missing from the draft, e.g. {', '.join(absent[:EXAMPLES])}",
                SAME_IDS + "the draft never saw these ids (their embedding rows were not "
                "trained), so it drafts poorly after each of them.",
            )
        )
    if flags:
        out.append(
            _finding(
                "info",
                "tokenizer.special_tokens",
                "the target's special flags",
                f"{len(flags)} differ, e.g. {', '.join(flags[:EXAMPLES])}",
                "Only detokenization reads the flag, and the engine detokenizes with the "
                "target's tokenizer: nothing at serving time reads the draft's.",
            )
        )
    return out


def chat_template_findings(
    draft: TokenizerFiles, target: TokenizerFiles, tokens: TokenizerInfo | None
) -> list[Finding]:
    """The draft was tuned on its own chat format; the engine applies the target's alone."""
    mine, theirs = draft.chat_template, target.chat_template
    if theirs is None or mine == theirs:
        return []
    if mine is None:
        return [
            _finding(
                "warning",
                "chat_template",
                "the target's chat template",
                "(none: a base model)",
                "The engine applies the target's chat template only (the draft's tokenizer files "
                "are never read); a draft never tuned on that conversation format may accept "
                "less on chat requests.",
            )
        ]
    markers = [t.content for t in tokens.added.values()] if tokens is not None else []
    role_mine = {m for m in markers if m in mine}
    role_theirs = {m for m in markers if m in theirs}
    if role_mine != role_theirs:
        return [
            _finding(
                "warning",
                "chat_template",
                f"the target's role markers {sorted(role_theirs)[:4]}",
                f"{sorted(role_mine)[:4]}",
                "The draft was tuned on another conversation format (other role and turn "
                "tokens) than the target's template produces; the engine applies only the "
                "target's, so the draft may accept less on chat requests.",
            )
        ]
    return [
        _finding(
            "info",
            "chat_template",
            "the target's chat template",
            "another text with the same role markers",
            "Only the target's template is applied at serving time; the draft's differs in "
            "wording (dates, defaults, tool text), not in its turn structure.",
        )
    ]


def uncompared_findings(
    draft: TokenizerFiles,
    target: TokenizerFiles,
    draft_tokens: TokenizerInfo | None,
    target_tokens: TokenizerInfo | None,
) -> list[Finding]:
    """A note when the two tokenizers had nothing in common to compare."""
    by_map = draft.vocab is not None and target.vocab is not None
    by_raw = bool(draft.raw.keys() & target.raw.keys())
    by_added = draft_tokens is not None and target_tokens is not None
    if by_map or by_raw or by_added:
        return []
    return [
        _finding(
            "info",
            "tokenizer",
            "the draft's and the target's tokenizer files",
            "not both present",
            "Which token each id means was not compared: put tokenizer.json or "
            "tokenizer_config.json next to both configs.",
        )
    ]
