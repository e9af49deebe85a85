"""The server's own log over one benchmark level: read by byte offset over SSH, then checked
against the ``/metrics`` deltas of the same window.

vLLM's log timestamps carry no year and the clocks of client and container may differ, so a
level's window is not found by time: the runner notes the file's size (``stat -c %s``) before the
level and reads from that offset after it. The stats lines of an interval are printed at its end,
so the runner waits one stats interval plus a margin after the warm-up (before taking the offset)
and after the level (before reading): then the window holds exactly the level's lines, and the
sums of its ``Accepted``/``Drafted`` integers equal the counter deltas. When they do not (another
client, a window straddling the boundary, a log cut by rotation) the level gets a warning.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dflashops.bench.models import ServerLogCheck
from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.errors import RemoteError
from dflashops.metrics.log_totals import spec_decode_totals
from dflashops.metrics.logs import parse_log

if TYPE_CHECKING:
    from dflashops.metrics.spec_decode import SpecDecodeDelta
    from dflashops.remote import SshConnection

MAX_WINDOW_BYTES = 64 * 2**20
# Per-position rates are printed with three decimals: a window's rate is off by up to 0.0005.
RATE_TOLERANCE = 0.0005
# A MAL with two decimals can leave several draft counts possible; the weighted rates then carry
# that uncertainty too.
INEXACT_RATE_TOLERANCE = 0.01


@dataclass(frozen=True)
class LogRead:
    """The bytes written to the log since ``offset`` (``rotated``: the file shrank, read whole)."""

    path: str
    offset: int
    text: str
    size: int
    rotated: bool = False


class ServerLog(Protocol):
    """Where the runner reads a server's log (blocking calls; the runner runs them in a thread)."""

    path: str

    def size(self) -> int: ...

    def read_from(self, offset: int) -> LogRead: ...


class RemoteServerLog:
    """The server log in a container, through the one SSH connection of the run."""

    def __init__(self, conn: SshConnection, path: str = DEFAULT_LAYOUT.log) -> None:
        self.conn = conn
        self.path = path

    def size(self) -> int:
        """The file's size in bytes; ``RemoteError`` when it cannot be read."""
        quoted = shlex.quote(self.path)
        # `--`: a --server-log that starts with "-" is a file name, not a stat option
        result = self.conn.probe(f"stat -c %s -- {quoted} && test -r {quoted}")
        first = result.stdout.strip().splitlines()[:1]
        if result.exit_code != 0 or not first or not first[0].isdigit():
            detail = result.stderr.strip().splitlines()[-1:] or ["not readable"]
            raise RemoteError(f"server log {self.path}: {detail[0]}", host=self.conn.name)
        return int(first[0])

    def read_from(self, offset: int) -> LogRead:
        """Everything written since ``offset`` (at most ``MAX_WINDOW_BYTES``, the newest)."""

        def read(sftp: Any) -> LogRead:
            with sftp.open(self.path, "rb") as handle:
                size = int(handle.stat().st_size)
                rotated = size < offset
                start = 0 if rotated else offset
                start = max(start, size - MAX_WINDOW_BYTES)
                handle.seek(start)
                data: bytes = handle.read(size - start) if size > start else b""
            return LogRead(
                path=self.path,
                offset=start,
                text=data.decode("utf-8", errors="replace"),
                size=size,
                rotated=rotated,
            )

        try:
            return self.conn.sftp(f"read {self.path} from byte {offset}", read)
        except OSError as exc:
            raise RemoteError(
                f"cannot read {self.path}: {exc.strerror or exc}", host=self.conn.name
            ) from None


def check_window(
    read: LogRead, spec: SpecDecodeDelta | None, *, concurrency: int
) -> tuple[ServerLogCheck, list[str]]:
    """Parse one level's log window and compare it with the counters; (check, warnings)."""
    summary = parse_log(read.text)
    windows = [w for w in summary.spec_decode_windows if w.source == "vllm"]
    warnings: list[str] = []
    where = f"concurrency {concurrency}"
    if read.rotated:
        warnings.append(
            f"{where}: {read.path} shrank during the level (rotated or truncated); its log "
            "window is incomplete"
        )
    totals = spec_decode_totals(windows) if windows else None
    check = ServerLogCheck(
        path=read.path,
        offset=read.offset,
        bytes_read=len(read.text.encode("utf-8", errors="replace")),
        stats_windows=len(summary.throughput_windows),
        spec_decode_windows=len(windows),
        accepted_tokens=totals.accepted_tokens if totals else None,
        drafted_tokens=totals.drafted_tokens if totals else None,
        num_drafts=totals.num_drafts if totals else None,
        num_drafts_exact=bool(totals and totals.num_drafts_exact),
        per_position_acceptance=totals.per_position_acceptance if totals else [],
        mean_generation_throughput=summary.throughput_totals.mean_generation_throughput,
    )
    if summary.spec_decode_windows and not windows:
        warnings.append(
            f"{where}: the log's spec-decode lines carry no per-window counts (vLLM V0 or "
            "SGLang); not compared with /metrics"
        )
        return check, warnings
    if spec is None or not spec.spec_decode:
        if check.accepted_tokens:
            warnings.append(
                f"{where}: the log shows spec decoding ({check.accepted_tokens} accepted tokens) "
                "but /metrics has no spec-decode counters"
            )
            return check.model_copy(update={"agrees": False}), warnings
        return check, warnings
    problems = _disagreements(check, spec)
    if problems:
        warnings.append(
            f"{where}: server log and /metrics disagree ({'; '.join(problems)}): another client, "
            "or a stats window straddling the level boundary"
        )
    return check.model_copy(update={"agrees": not problems}), warnings


def _disagreements(check: ServerLogCheck, spec: SpecDecodeDelta) -> list[str]:
    if not spec.num_draft_tokens and not check.spec_decode_windows:
        return []  # nothing drafted in the window, nothing logged: consistent
    if not check.spec_decode_windows:
        return [
            f"/metrics counted {spec.num_draft_tokens} draft tokens, the log has no SpecDecoding "
            "line (log stats off, or another log file?)"
        ]
    problems = []
    if check.accepted_tokens != spec.num_accepted_tokens:
        problems.append(f"Accepted {check.accepted_tokens} vs {spec.num_accepted_tokens}")
    if check.drafted_tokens != spec.num_draft_tokens:
        problems.append(f"Drafted {check.drafted_tokens} vs {spec.num_draft_tokens}")
    exact = check.num_drafts_exact
    if exact and spec.num_drafts is not None and check.num_drafts != spec.num_drafts:
        problems.append(f"drafts {check.num_drafts} vs {spec.num_drafts}")
    tolerance = RATE_TOLERANCE if exact else INEXACT_RATE_TOLERANCE
    metric_rates = spec.per_position_acceptance
    if check.per_position_acceptance and metric_rates:
        if len(check.per_position_acceptance) != len(metric_rates):
            problems.append(
                f"{len(check.per_position_acceptance)} positions vs {len(metric_rates)}"
            )
        else:
            for pos, (logged, counted) in enumerate(
                zip(check.per_position_acceptance, metric_rates, strict=True)
            ):
                if abs(logged - counted) > tolerance + 1e-9:
                    problems.append(f"position {pos} rate {logged:.3f} vs {counted:.4f}")
    return problems
