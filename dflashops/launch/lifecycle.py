"""Start, watch and stop the server in a container, under systemd or the fallback supervisor.

Both supervisors run ``/etc/dflashops/launch.sh``, which appends ``start PID EPOCH`` to the
events file before it execs the server (so the pid is the engine's); the supervisor (or
systemd's ``ExecStopPost``) appends ``exit CODE EPOCH`` when it ends. ``launch`` notes the
events and log sizes before a start and reads only what came after, so an old failure is never
taken for a new one.

A pid from a pidfile is trusted only if the process is alive, runs in the caller's mount
namespace (a lab container shares this machine's pid space) and its command line is ours; a
process caught in the middle of an exec (its command line empty for a moment) is looked at twice.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dflashops.deployment.layout import DEFAULT_LAYOUT, UNIT_NAME, Layout
from dflashops.errors import ServerError
from dflashops.launch.processes import (
    END_GRACE_S,
    IN_GROUPS,
    Process,
    end_script,
    groups_script,
    parse_processes,
    processes_script,
    strays,
)
from dflashops.launch.readiness import ProcessView
from dflashops.remote import SshConnection

PROBE_DEADLINE_S = 30.0
START_EVENT_WAIT_S = 45.0
STOP_GRACE_S = 45.0
LOG_TAIL_BYTES = 256 * 1024

# Shell helpers every script below starts with.
_HELPERS = (
    r"""
ours_now() {  # 0: ours; 1: not ours; 2: its command line read empty (mid-exec, or a zombie)
    p=$1
    case "$p" in ''|*[!0-9]*) return 1 ;; esac
    [ "$p" -gt 1 ] && [ -d "/proc/$p" ] || return 1
    [ "$(readlink "/proc/$p/ns/mnt")" = "$(readlink /proc/self/ns/mnt)" ] || return 1
    st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)
    [ "$st" != Z ] || return 1
    _ours_cmd=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)
    [ -n "$_ours_cmd" ] || return 2
    printf '%s' "$_ours_cmd" | grep -qiE 'dflashops|vllm|sglang'
}
ours() {
    # a process in the middle of an exec (launch.sh -> dflashops.server -> the engine) shows an
    # empty command line for a moment: look again before calling a live server gone
    ours_now "$1"; _ours_rc=$?
    [ "$_ours_rc" -eq 2 ] || return "$_ours_rc"
    sleep 0.2
    ours_now "$1" || return 1
}
pgid_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f3; }
size_of() { if [ -f "$1" ]; then wc -c < "$1" | tr -d ' '; else echo 0; fi; }
readpid() { [ -f "$1" ] && head -c 32 "$1" | tr -dc '0-9'; }
"""
    + IN_GROUPS
)


def _script(*lines: str) -> str:
    return _HELPERS + "\n".join(lines)


@dataclass(frozen=True)
class RunState:
    """What runs now and where the events and the log end."""

    server_pid: int | None
    supervisor_pid: int | None
    systemd: bool  # the container runs systemd
    unit_active: bool
    events_size: int
    log_size: int
    # processes an earlier server of a recorded group left (see dflashops.launch.processes)
    strays: tuple[Process, ...] = ()

    @property
    def running(self) -> bool:
        return self.server_pid is not None or self.supervisor_pid is not None or self.unit_active


def state_script(layout: Layout) -> str:
    q = shlex.quote
    return _script(
        f'sp=$(readpid {q(layout.supervisor_pidfile)}); ours "$sp" && echo "supervisor $sp"',
        f'pp=$(readpid {q(layout.pidfile)}); ours "$pp" && echo "server $pp"',
        "if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then "
        "echo systemd; systemctl is-active --quiet " + UNIT_NAME + " && echo unit-active; fi",
        f'echo "events $(size_of {q(layout.events)})"',
        f'echo "log $(size_of {q(layout.log)})"',
        processes_script(layout),
    )


def parse_state(output: str) -> RunState:
    values: dict[str, str] = {}
    for line in output.splitlines():
        key, _, value = line.strip().partition(" ")
        if key != "proc":
            values[key] = value
    server, supervisor = _int(values.get("server")), _int(values.get("supervisor"))
    return RunState(
        server_pid=server,
        supervisor_pid=supervisor,
        systemd="systemd" in values,
        unit_active="unit-active" in values,
        events_size=_int(values.get("events")) or 0,
        log_size=_int(values.get("log")) or 0,
        strays=tuple(strays(parse_processes(output), server, supervisor)),
    )


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def run_state(conn: SshConnection, layout: Layout = DEFAULT_LAYOUT) -> RunState:
    out = conn.run(state_script(layout), deadline=PROBE_DEADLINE_S, display="server state")
    return parse_state(out.stdout)


# --------------------------------------------------------------------------- start


def start(conn: SshConnection, state: RunState, *, systemd: bool, layout: Layout) -> int:
    """Start the server; return its pid once its ``start`` event appears (bounded)."""
    command = start_script(layout, systemd=systemd)
    conn.run(command, deadline=PROBE_DEADLINE_S, display="start server")
    return wait_start_event(conn, state.events_size, layout)


def start_script(layout: Layout, *, systemd: bool) -> str:
    """Start under systemd, or launch the fallback supervisor in its own session (refusing
    when one already runs: two supervisors would fight over the port)."""
    q = shlex.quote
    if systemd:
        # reset-failed: a unit that hit its start limit refuses to start otherwise
        return (
            f"systemctl daemon-reload && systemctl reset-failed {UNIT_NAME} 2>/dev/null; "
            f"systemctl enable --quiet {UNIT_NAME} && systemctl restart {UNIT_NAME}"
        )
    supervisor = q(layout.supervisor)
    return _script(
        f'sp=$(readpid {q(layout.supervisor_pidfile)}); if ours "$sp"; then '
        'echo "supervisor $sp is still running" >&2; exit 3; fi',
        f"mkdir -p {q(layout.state)} {q(layout.log_dir)}",
        "if setsid -f true 2>/dev/null; then "
        f"setsid -f {supervisor} </dev/null >/dev/null 2>&1; "
        f"else nohup setsid {supervisor} </dev/null >/dev/null 2>&1 & fi",
    )


def wait_start_event(conn: SshConnection, offset: int, layout: Layout) -> int:
    q = shlex.quote
    deadline = time.monotonic() + START_EVENT_WAIT_S
    while True:
        out = conn.run(
            f"tail -c +{offset + 1} {q(layout.events)} 2>/dev/null "
            "| grep -E '^(start|exit|gaveup)'",
            ok_codes=None,
            deadline=PROBE_DEADLINE_S,
            display="read events",
        ).stdout
        for line in out.splitlines():
            kind, *rest = line.split()
            if kind == "start" and rest and rest[0].isdigit():
                return int(rest[0])
            if kind in ("exit", "gaveup"):
                raise ServerError(f"the server exited before it started ({line.strip()})")
        if time.monotonic() > deadline:
            raise ServerError(
                f"the server did not start within {START_EVENT_WAIT_S:.0f}s "
                f"(no start event in {layout.events})",
                log_tail=log_tail(conn, layout, 0, 20),
            )
        time.sleep(0.5)


# --------------------------------------------------------------------------- watch


def watch_script(layout: Layout, pid: int, events_offset: int, log_offset: int) -> str:
    q = shlex.quote
    return _script(
        f"if ours {pid}; then echo alive; fi",
        f"tail -c +{events_offset + 1} {q(layout.events)} 2>/dev/null "
        "| grep -E '^(exit|gaveup)' | head -n1 | sed 's/^/event /'",
        f"tail -c +{log_offset + 1} {q(layout.log)} 2>/dev/null | tail -c 65536 "
        "| grep -v 'Route:' | grep -v '^[[:space:]]*$' | tail -n1 | sed 's/^/log /'",
    )


def parse_watch(output: str) -> ProcessView:
    alive, exit_code, log_line = False, None, None
    for line in output.splitlines():
        key, _, rest = line.partition(" ")
        if key == "alive":
            alive = True
        elif key == "event":
            parts = rest.split()
            if parts and parts[0] == "exit":
                exit_code = _int(parts[1]) if len(parts) > 1 else -1
                exit_code = -1 if exit_code is None else exit_code
            elif parts and parts[0] == "gaveup":
                exit_code = -1
        elif key == "log":
            log_line = rest.strip()[:300]
    return ProcessView(alive=alive, exit_code=exit_code, log_line=log_line)


class Watcher:
    """The readiness loop's view of the process: one SSH command per poll."""

    def __init__(
        self, conn: SshConnection, layout: Layout, pid: int, events_offset: int, log_offset: int
    ) -> None:
        self.conn = conn
        self.script = watch_script(layout, pid, events_offset, log_offset)

    def __call__(self) -> ProcessView:
        out = self.conn.run(self.script, ok_codes=None, deadline=PROBE_DEADLINE_S, display="watch")
        return parse_watch(out.stdout)


def exit_code_since(
    conn: SshConnection, layout: Layout, offset: int, wait_s: float = 3.0
) -> int | None:
    """The first ``exit`` code recorded after ``offset`` (its supervisor may lag a moment)."""
    deadline = time.monotonic() + wait_s
    while True:
        out = conn.run(
            f"tail -c +{offset + 1} {shlex.quote(layout.events)} 2>/dev/null "
            "| grep -E '^exit ' | head -n1",
            ok_codes=None,
            deadline=PROBE_DEADLINE_S,
            display="read events",
        ).stdout.split()
        if len(out) >= 2:
            return _int(out[1])
        if time.monotonic() > deadline:
            return None
        time.sleep(0.5)


def log_since(conn: SshConnection, layout: Layout, offset: int) -> str:
    """The log written since ``offset`` (its last 256 KiB)."""
    out = conn.run(
        f"tail -c +{offset + 1} {shlex.quote(layout.log)} 2>/dev/null | tail -c {LOG_TAIL_BYTES}",
        ok_codes=None,
        deadline=PROBE_DEADLINE_S,
        display="read log",
    )
    return out.stdout


def log_tail(conn: SshConnection, layout: Layout, offset: int, lines: int) -> list[str]:
    return tail_of(log_since(conn, layout, offset), lines)


def tail_of(text: str, lines: int) -> list[str]:
    kept = [line for line in text.splitlines() if line.strip() and "Route:" not in line]
    return kept[-lines:]


# --------------------------------------------------------------------------- stop


def stop_script(layout: Layout, *, systemd: bool, disable: bool, grace_s: float) -> str:
    q = shlex.quote
    lines = []
    if systemd:
        verb = "disable --now" if disable else "stop"
        lines.append(f"systemctl {verb} --quiet {UNIT_NAME} 2>/dev/null || true")
    lines += [
        # every group a server was started in: a killed server's engine children live on in
        # its group after it (dflashops.launch.processes); one member still ours is enough
        groups_script(layout),
        "recorded=$groups; groups=''",
        "for g in $recorded; do",
        '    [ "$g" != "$(pgid_of $$)" ] || continue',
        '    for p in $(in_groups "$g" | cut -d" " -f1); do',
        '        if ours "$p"; then kill -TERM "-$g" 2>/dev/null; groups="$groups $g"; break; fi',
        "    done",
        "done",
        f"for f in {q(layout.supervisor_pidfile)} {q(layout.pidfile)}; do",
        '    p=$(readpid "$f"); ours "$p" || continue',
        '    g=$(pgid_of "$p"); case "$g" in \'\'|*[!0-9]*) continue ;; esac',
        '    [ "$g" -gt 1 ] && [ "$g" != "$(pgid_of $$)" ] || g=""',
        '    if [ -n "$g" ]; then kill -TERM "-$g" 2>/dev/null; groups="$groups $g"; '
        'else kill -TERM "$p" 2>/dev/null; fi',
        "done",
        f"end=$(( $(date +%s) + {int(grace_s)} ))",
        'while [ "$(date +%s)" -lt "$end" ]; do',
        "    left=''",
        # a group is left while one of ours runs in it (a zombie nobody reaps yet is gone)
        "    for g in $groups; do for p in $(in_groups \"$g\" | cut -d' ' -f1); do",
        '        if ours "$p"; then left="$left $g"; break; fi',
        "    done; done",
        f'    pp=$(readpid {q(layout.pidfile)}); ours "$pp" && left="$left p"',
        '    [ -z "$left" ] && break',
        "    sleep 0.5",
        "done",
        'for g in $groups; do kill -KILL "-$g" 2>/dev/null && echo "killed group $g"; done',
        f'pp=$(readpid {q(layout.pidfile)}); ours "$pp" && kill -KILL "$pp" 2>/dev/null',
        f"rm -f {q(layout.supervisor_pidfile)}",
        "exit 0",
    ]
    return _script(*lines)


def stop(
    conn: SshConnection,
    *,
    systemd: bool,
    layout: Layout = DEFAULT_LAYOUT,
    disable: bool = False,
    grace_s: float = STOP_GRACE_S,
) -> None:
    """SIGTERM the supervisor's and the server's process groups, SIGKILL what is left after
    ``grace_s``; under systemd, ``systemctl stop`` (``disable --now`` when ``disable``)."""
    conn.run(
        stop_script(layout, systemd=systemd, disable=disable, grace_s=grace_s),
        deadline=grace_s + PROBE_DEADLINE_S,
        display="stop server",
    )


def end_processes(conn: SshConnection, found: Sequence[Process]) -> None:
    """End ``found`` (strays of an earlier server: the running server's tree is never among
    them), each only while it is still ours."""
    if found:
        conn.run(
            _script(end_script([p.pid for p in found])),
            deadline=END_GRACE_S + PROBE_DEADLINE_S,
            display="end stray engine processes",
        )
