"""The processes of a managed server: its tree, and the strays an earlier server left.

An engine runs as several processes: vLLM's API server spawns an ``EngineCore`` and its
``Worker``s. When the API server is killed (``kill -9``, an OOM kill) they are re-parented and
keep their memory (GPU memory too) while the supervisor starts a new server beside them. Every
server dflashops starts records its process group in its ``start`` event (``launch.sh``:
``start PID EPOCH PGID``); the engine's children stay in that group. So the processes of those
groups that are not the running server's tree (nor its supervisor) are strays: ``status`` and
``doctor`` name them, ``launch`` ends them, ``stop`` ends every recorded group.

One ``awk`` reads every ``/proc/PID/stat`` at once (a lab container shares this machine's pid
space: hundreds of processes); only the few in a recorded group are checked further (the mount
namespace and the command line, as :mod:`dflashops.launch.lifecycle` trusts a pid).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from dflashops.deployment.layout import Layout

RECENT_STARTS = 200  # start events looked at: a restart loop's whole history, not the file's
END_GRACE_S = 20


# ``in_groups " G1 G2 "``: "PID PPID PGID RSS_PAGES" of every process in one of those groups
IN_GROUPS = r"""
in_groups() {
    awk -v groups=" $1 " 'match($0, /\) [A-Za-z] /) {
        split(substr($0, RSTART + 2), f, " ")
        if (index(groups, " " f[3] " ")) {
            n = FILENAME; sub(/^\/proc\//, "", n); sub(/\/stat$/, "", n)
            print n, f[2], f[3], f[22]
        }
    }' /proc/[0-9]*/stat 2>/dev/null
}
"""


def groups_script(layout: Layout) -> str:
    """Shell that sets ``$groups``: the process groups recorded in recent start events (the
    helpers of :mod:`dflashops.launch.lifecycle` are defined before it)."""
    events = shlex.quote(layout.events)
    return (
        f"groups=$(tail -n {RECENT_STARTS} {events} 2>/dev/null "
        "| awk '$1 == \"start\" && $4 ~ /^[0-9]+$/ && $4 > 1 {print $4}' | sort -u | tr '\\n' ' ')"
    )


def processes_script(layout: Layout) -> str:
    """Prints ``proc PID PPID PGID RSS_KB COMMAND`` for each of our processes in a recorded
    group (``ours``: the caller's mount namespace and a dflashops/vLLM/SGLang command line)."""
    return "\n".join(
        [
            groups_script(layout),
            'if [ -n "$groups" ]; then in_groups "$groups" | while read -r p ppid pgid pages; do',
            '    ours "$p" || continue',
            '    cmd=$(head -c 160 "/proc/$p/cmdline" 2>/dev/null | tr "\\0" " ")',
            '    echo "proc $p $ppid $pgid $((pages * 4)) $cmd"',
            "done; fi",
        ]
    )


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    pgid: int
    rss_kb: int
    command: str

    def line(self) -> str:
        return f"pid {self.pid} ({self.rss_kb // 1024} MB): {self.command[:80]}"


def parse_processes(output: str) -> list[Process]:
    found = []
    for line in output.splitlines():
        if not line.startswith("proc "):
            continue
        parts = line.split(" ", 5)
        try:
            pid, ppid, pgid, rss = (int(x) for x in parts[1:5])
        except (ValueError, IndexError):
            continue
        found.append(Process(pid, ppid, pgid, rss, parts[5].strip() if len(parts) > 5 else ""))
    return found


def strays(processes: list[Process], server: int | None, supervisor: int | None) -> list[Process]:
    """The processes not in the running server's tree (nor its supervisor): what an earlier
    server of these groups left behind."""
    children: dict[int, list[int]] = {}
    for p in processes:
        children.setdefault(p.ppid, []).append(p.pid)
    tree = {pid for pid in (server, supervisor) if pid is not None}
    todo = [server] if server is not None else []
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return [p for p in processes if p.pid not in tree]


def end_script(pids: list[int], grace_s: int = END_GRACE_S) -> str:
    """SIGTERM each pid that is still ours, SIGKILL what is left after ``grace_s``."""
    listed = " ".join(str(int(p)) for p in pids)
    return "\n".join(
        [
            f'left=\'\'; for p in {listed}; do ours "$p" && kill -TERM "$p" 2>/dev/null '
            '&& left="$left $p"; done',
            f"end=$(( $(date +%s) + {int(grace_s)} ))",
            'while [ -n "$left" ] && [ "$(date +%s)" -lt "$end" ]; do',
            '  still=\'\'; for p in $left; do ours "$p" && still="$still $p"; done',
            '  left=$still; [ -n "$left" ] && sleep 0.5',
            "done",
            'for p in $left; do kill -KILL "$p" 2>/dev/null && echo "killed $p"; done',
            "exit 0",
        ]
    )
