"""SGLang's decode lines, and which formula printed their ``accept rate``.

The line (``scheduler_metrics_mixin.py``, older ``scheduler.py``): ``Decode batch[ [iter]][.,]
#running-req: …, #token: …, token usage: …, [accept len: …, [accept rate: …,]] [pre-allocated
usage …,] cuda graph: …, gen throughput (token/s): …, [largest-len: …,] #queue-req: …[,]``.

``accept len`` has always been accepted tokens (bonus included) per verify step: the mean
acceptance length. ``accept rate`` (added in 2025) changed meaning:

- before PR #23530 (merged 2026-04-23): accepted tokens / (steps × num_draft_tokens), that is
  ``accept len / n`` with n the draft tokens per step counting the current token (before PR #13212,
  2025-11, n was ``speculative_num_steps + 1``); no acceptance prints 1/n, not 0;
- from PR #23530: accepted drafts / proposed drafts = ``(accept len − 1) / (n − 1)``.

A line does not say which. The log may: SGLang prints its ``server_args`` at start, with
``speculative_num_draft_tokens`` and ``speculative_num_steps``. Otherwise the numbers may: across
the windows of one server, n is fixed, so only one formula fits every (accept len, accept rate)
pair for one integer n within the two printed decimals. When both fit with different n, the
formula is reported unknown and only the printed rate is given. When both fit with the same n
they agree: ``accept rate`` 1.00 at ``accept len`` n (every draft accepted) is 1.00 under either,
so n, k = n − 1 and the rate in the consistent definition are known all the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dflashops.metrics.log_lines import read_float, read_int
from dflashops.metrics.log_models import RateFormula, SpecDecodeWindow, ThroughputWindow

# exactly two decimals, then a comma or the line's end: a number cut mid-way has fewer decimals
_TWO_DECIMALS = r"(\d+\.\d{2})(?=,|\s*$)"
_MAX_DRAFT_TOKENS = 64  # the largest tree SGLang's docs use (topk 8): beyond, ask the log's args
_HALF_UNIT = 0.005  # both numbers are printed with two decimals


def decode_windows(
    base: dict[str, object], message: str
) -> tuple[ThroughputWindow, SpecDecodeWindow | None]:
    """The throughput part of a decode line and, with speculation on, its spec part."""
    usage = read_float(message, r"(?<![\w-])token usage: " + _TWO_DECIMALS)
    complete = re.search(r"#queue-req: \d+", message) is not None
    throughput = ThroughputWindow.model_validate(
        {
            **base,
            "generation_throughput": read_float(
                message, r"gen throughput \(token/s\): " + _TWO_DECIMALS
            ),
            "running": read_int(message, r"#running-req: (\d+)(?=,)"),
            # the last part: no comma after it in older versions, so a line's end also ends it
            "waiting": read_int(message, r"#queue-req: (\d+)(?=,|\s*$)"),
            "used_tokens": read_int(message, r"#token: (\d+)(?=,)"),
            "kv_cache_usage_pct": None if usage is None else 100.0 * usage,
            "truncated": not complete,
        }
    )
    accept_len = read_float(message, r"(?<![\w-])(?<!block )accept len: " + _TWO_DECIMALS)
    if accept_len is None:
        return throughput, None
    rate = read_float(message, r"(?<![\w-])accept rate: " + _TWO_DECIMALS)
    spec = SpecDecodeWindow.model_validate(
        {
            **base,
            "mean_acceptance_length": accept_len,
            "acceptance_rate_pct": None if rate is None else 100.0 * rate,
            "truncated": not complete,
        }
    )
    return throughput, spec


def server_args_draft_tokens(text_line: str) -> tuple[int | None, int | None] | None:
    """(num_draft_tokens, num_steps) from a ``server_args=ServerArgs(…)`` line, or None."""
    if "speculative_num_draft_tokens=" not in text_line:
        return None
    tokens = read_int(text_line, r"speculative_num_draft_tokens=(\d+)")
    steps = read_int(text_line, r"speculative_num_steps=(\d+)")
    return tokens, steps


def rate_formula(
    windows: Sequence[SpecDecodeWindow], args: tuple[int | None, int | None] | None
) -> tuple[RateFormula, int | None]:
    """Which formula printed the windows' accept rates, and n (draft tokens per step, current
    token counted) where one integer fits; ("unknown", None) when the log does not tell."""
    pairs = [
        (w.mean_acceptance_length, w.acceptance_rate_pct / 100.0)
        for w in windows
        if w.mean_acceptance_length is not None and w.acceptance_rate_pct is not None
    ]
    if not pairs:
        return "unknown", None
    if args is not None:
        tokens, steps = args
        candidates = sorted({n for n in (tokens, steps + 1 if steps else None) if n and n > 1})
    else:
        candidates = list(range(2, _MAX_DRAFT_TOKENS + 1))
    with_bonus = [n for n in candidates if _fits(pairs, n, bonus=True)]
    drafts_only = [n for n in candidates if _fits(pairs, n, bonus=False)]
    if with_bonus and drafts_only:
        agreed = set(with_bonus) | set(drafts_only)
        if len(agreed) == 1:
            return "sglang-either", agreed.pop()
        return "unknown", None  # the numbers fit both: only the printed rate is certain
    given = args[0] if args is not None else None
    if with_bonus:
        return "sglang-with-bonus", _one(with_bonus, given)
    if drafts_only:
        return "sglang-drafts-only", _one(drafts_only, given)
    return "unknown", None


def _one(fitting: list[int], given: int | None) -> int | None:
    """The n the windows fit; where several do (nothing accepted fits every n), the verify
    window the server was given (``speculative_num_draft_tokens``: DFLASH logs
    ``speculative_num_steps=1`` beside it)."""
    if len(fitting) == 1:
        return fitting[0]
    return given if given in fitting else None


def _fits(pairs: list[tuple[float, float]], n: int, *, bonus: bool) -> bool:
    """Whether every printed (accept len, accept rate) pair fits the formula with n."""
    for accept_len, rate in pairs:
        if accept_len > n + _HALF_UNIT:
            return False  # at most n tokens per step (n - 1 drafts and the bonus token)
        denominator = n if bonus else n - 1
        expected = (accept_len if bonus else accept_len - 1.0) / denominator
        if abs(rate - expected) > _HALF_UNIT + _HALF_UNIT / denominator + 1e-9:
            return False
    return True


def consistent_rate_pct(
    window: SpecDecodeWindow, formula: RateFormula, n: int | None
) -> float | None:
    """The window's rate as accepted drafts / drafts (``CONSISTENT_RATE``), in percent."""
    if formula == "sglang-drafts-only":
        return window.acceptance_rate_pct  # already that definition
    length = window.mean_acceptance_length
    if formula in ("sglang-with-bonus", "sglang-either") and n and length is not None:
        # with n known, (accept len - 1) / (n - 1) is that rate whichever formula printed it
        return 100.0 * (length - 1.0) / (n - 1)
    return None
