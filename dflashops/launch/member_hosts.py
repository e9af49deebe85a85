"""The members' names in each member's ``/etc/hosts``: a block dflashops manages.

vLLM's runtime and its c10d/Gloo rendezvous resolve host names (their own and the peers'); a
cluster without DNS for its containers would wait on lookups that never answer. ``launch``
writes one block, between a begin and an end line, naming every member of the placement::

    # BEGIN dflashops placement (launch rewrites these lines)
    10.0.0.11 ct1
    10.0.0.12 ct2
    # END dflashops placement

Every other line of the file stays as it was (PVE's own ``# --- BEGIN PVE ---`` block included);
a second launch with the same members changes nothing, a different group replaces the block.
The file is rewritten in place (``cat >``), never renamed over: a container's ``/etc/hosts`` can
be a bind mount, which a rename would fail on.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Sequence

from dflashops.errors import PlaybookError
from dflashops.launch.placement import Member
from dflashops.remote import SshConnection

HOSTS_FILE = "/etc/hosts"
BEGIN = "# BEGIN dflashops placement (launch rewrites these lines)"
END = "# END dflashops placement"
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def hosts_block(members: Sequence[Member]) -> list[str]:
    """The managed lines for ``members``; a name or address a hosts file cannot hold is refused
    (a newline in either would write lines of its own)."""
    lines = [BEGIN]
    for member in members:
        try:
            address = ipaddress.ip_address(member.address)
        except ValueError:
            raise _refused(f"address {member.address!r} of {member.name!r} is no IP") from None
        if not _HOST_NAME.match(member.name):
            raise _refused(f"member name {member.name!r} is no host name")
        lines.append(f"{address} {member.name}")
    lines.append(END)
    return lines


def merge_hosts(current: str, members: Sequence[Member]) -> str:
    """``current`` with its managed block replaced by ``members``' (appended when it has none).

    Lines outside the block are kept byte for byte; an unterminated block (a begin line with no
    end) is replaced up to the end of the file, as a cut-short write left it.
    """
    lines = current.splitlines()
    block = hosts_block(members)
    if BEGIN in lines:
        start = lines.index(BEGIN)
        end = lines.index(END, start) + 1 if END in lines[start:] else len(lines)
        merged = [*lines[:start], *block, *lines[end:]]
    else:
        merged = [*lines, *block]
    return "\n".join(merged) + "\n"


def write_member_hosts(
    conn: SshConnection, members: Sequence[Member], *, path: str = HOSTS_FILE
) -> bool:
    """Make ``path`` on ``conn`` hold the members' block; returns whether it changed."""
    quoted = shlex.quote(path)
    current = conn.run(f"cat -- {quoted} 2>/dev/null || true", deadline=30).stdout
    wanted = merge_hosts(current, members)
    if wanted == current:
        return False
    conn.run(f"cat > {quoted}", stdin=wanted, deadline=30, display=f"write {path}")
    return True


def _refused(what: str) -> PlaybookError:
    return PlaybookError(
        f"cannot name the members in /etc/hosts: {what}",
        source="placement",
        hint="give each member a static IP and an inventory name that is a host name",
    )
