"""Watching a placement's members while they start: alive or dead, and which ranks joined.

A rank has joined when its member's log has vLLM's own line for it,
``rank R in world size W is assigned as DP rank …`` (``initialize_model_parallel`` in
``vllm/distributed/parallel_state.py``, 0.32): it is logged once the rank's process groups are
formed, which needs every rank of the world in the rendezvous. One SSH command per member and
poll: the single-container watch script plus a grep for those lines.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dflashops.deployment.layout import Layout
from dflashops.errors import RemoteError
from dflashops.launch import lifecycle
from dflashops.launch.readiness import ProcessView
from dflashops.progress import Say
from dflashops.remote import SshConnection

JOINED_RE = re.compile(r"rank (\d+) in world size (\d+) is assigned as")
_JOINED_GREP = "rank [0-9]+ in world size [0-9]+ is assigned as"


def member_ranks(node_rank: int, world: int, nnodes: int) -> list[int]:
    """The global ranks vLLM puts on node ``node_rank`` (``world / nnodes`` each, in order)."""
    local = world // nnodes
    return list(range(node_rank * local, (node_rank + 1) * local))


def joined_ranks(output: str, world: int) -> set[int]:
    """Ranks of world size ``world`` whose line is in ``output``."""
    ranks = set()
    for match in JOINED_RE.finditer(output):
        if int(match.group(2)) == world:
            ranks.add(int(match.group(1)))
    return ranks


@dataclass(frozen=True)
class MemberWatch:
    """One member's started server: where to look, from where in its events and log."""

    name: str
    conn: SshConnection
    layout: Layout
    pid: int
    events_offset: int
    log_offset: int
    rank: int = 0  # its node rank in the placement
    address: str = ""

    def script(self) -> str:
        log = shlex.quote(self.layout.log)
        return lifecycle.watch_script(
            self.layout, self.pid, self.events_offset, self.log_offset
        ) + (
            f"\ntail -c +{self.log_offset + 1} {log} 2>/dev/null "
            f"| grep -oE {shlex.quote(_JOINED_GREP)} | sed 's/^/joined /'"
        )

    def __call__(self) -> tuple[ProcessView | None, str]:
        """(the process view, the ``joined`` lines); no view when the member did not answer
        this time (a loaded 2-core lab host can take longer than a poll's deadline while the
        ranks import torch: the caller's deadline decides, not one slow poll)."""
        try:
            out = self.conn.run(
                self.script(), ok_codes=None, deadline=lifecycle.PROBE_DEADLINE_S, display="watch"
            ).stdout
        except RemoteError:
            return None, ""
        joined = "\n".join(line for line in out.splitlines() if line.startswith("joined "))
        return lifecycle.parse_watch(out), joined


def dead(view: ProcessView | None) -> bool:
    return view is not None and (not view.alive or view.exit_code is not None)


class GroupWatch:
    """The readiness loop's process view: the head's (the first), dead as soon as any member
    is; :attr:`dead` names that member."""

    def __init__(self, members: Sequence[MemberWatch]) -> None:
        self.members = list(members)
        self.dead: MemberWatch | None = None
        self.dead_code: int | None = None

    def __call__(self) -> ProcessView:
        views = []
        for member in self.members:
            view, _ = member()
            if view is not None and dead(view):
                self.dead, self.dead_code = member, view.exit_code
                return ProcessView(alive=False, exit_code=view.exit_code, log_line=view.log_line)
            views.append(view)
        # a head that did not answer this poll is taken as alive: HTTP tells the rest
        return views[0] or ProcessView(alive=True, log_line="(no answer over SSH this poll)")


JOIN_POLL_S = 1.0


@dataclass(frozen=True)
class JoinFailure:
    """The member that stopped the group forming, and how."""

    name: str
    what: str
    exited: bool  # its process ended (its log explains it), or it merely never joined


def wait_joined(
    members: Sequence[MemberWatch],
    *,
    world: int,
    deadline_s: float,
    say: Say,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, float], JoinFailure | None]:
    """Poll every member until each of its ranks has joined (``deadline_s`` seconds from now);
    returns the seconds each member took, and the first member that died or never joined."""
    started = clock()
    joined_in: dict[str, float] = {}
    silent: set[str] = set()  # members whose last poll got no answer over SSH
    while True:
        for m in members:
            if m.name in joined_in:
                continue
            view, lines = m()
            if view is None:
                silent.add(m.name)
                continue
            silent.discard(m.name)
            if dead(view):
                return joined_in, JoinFailure(
                    m.name, f"exited (code {view.exit_code}) before joining", exited=True
                )
            wanted = set(member_ranks(m.rank, world, len(members)))
            if wanted <= joined_ranks(lines, world):
                joined_in[m.name] = round(clock() - started, 1)
                say(f"{m.name}: ranks {sorted(wanted)} of {world} joined")
        waiting = [m for m in members if m.name not in joined_in]
        if not waiting:
            return joined_in, None
        if clock() - started > deadline_s:
            names = ", ".join(
                f"{m.name} ({m.address}, rank {m.rank}"
                + (", not answering over SSH)" if m.name in silent else ")")
                for m in waiting
            )
            return joined_in, JoinFailure(
                waiting[0].name,
                f"did not join within {deadline_s:.0f}s (still waiting: {names})",
                exited=False,
            )
        say(
            f"waiting for {', '.join(sorted(m.name for m in waiting))} to join "
            f"({clock() - started:.0f}s)"
        )
        sleep(JOIN_POLL_S)
