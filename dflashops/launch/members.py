"""What each member of a placement runs: the single-container playbook, made one rank's.

Pure. Every member gets the files a single-container launch renders (server spec, launch script,
supervisor), from a copy of the playbook whose engine arguments carry the rank:

* all: ``--tensor-parallel-size``/``--pipeline-parallel-size`` of the whole placement, ``--nnodes``,
  ``--node-rank``, ``--master-addr`` (the head's address) and ``--master-port``; ``VLLM_HOST_IP``
  (the address the others reach this member at: vLLM's message queues and Gloo bind to it) and
  a private ``TMPDIR`` (two runtimes on one machine must not share a session folder);
* the head (rank 0): the API server on ``server.host``/``server.port``;
* the others: ``--headless`` (no API server; vLLM's ``run_headless`` starts the workers that join
  the head, see ``vllm/entrypoints/cli/serve.py``).

A member that fails is not restarted alone (``max_restarts`` 0): the ranks form one process
group, so a lone restarted rank cannot rejoin; ``launch`` restarts the group.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, replace

from dflashops.deployment.layout import Layout
from dflashops.errors import PlaybookError
from dflashops.launch.placement import Member
from dflashops.launch.render import Rendered, RenderedFile, RenderInputs, RestartPolicy, render
from dflashops.playbook.models import Playbook
from dflashops.playbook.placement import Placement

MEMBER_RESTART = RestartPolicy(max_restarts=0)
# vLLM flags a placement decides; the playbook's extra_args may not set them too
PLACEMENT_FLAGS = frozenset(
    {
        "--nnodes",
        "-n",
        "--node-rank",
        "-r",
        "--master-addr",
        "--master-port",
        "--headless",
        "--pipeline-parallel-size",
        "-pp",
        "--tensor-parallel-size",
        "-tp",
        "--distributed-executor-backend",
    }
)


def placement_file(layout: Layout) -> str:
    """Where each member keeps the placement it belongs to (``stop``/``status`` read it)."""
    return posixpath.join(layout.etc, "placement.json")


def member_tmpdir(layout: Layout) -> str:
    return posixpath.join(layout.state, "tmp")


def member_tmp_marker(layout: Layout) -> str:
    """A file in the member's ``TMPDIR``: pushing it makes the folder, and it says why it is
    there."""
    return posixpath.join(member_tmpdir(layout), "README")


@dataclass(frozen=True)
class MemberRender:
    member: Member
    playbook: Playbook
    rendered: Rendered


def member_playbook(playbook: Playbook, member: Member, head: Member, layout: Layout) -> Playbook:
    """The playbook as ``member`` runs it: the rank's flags and environment added."""
    placement = playbook.placement
    assert placement is not None
    server = playbook.server
    for key, given in (
        ("server.extra_args", server.extra_args),
        ("server.engine_args.vllm", server.engine_args.get("vllm", [])),
    ):
        _no_placement_flags(playbook.name, key, given)
    args = list(server.extra_args) + runtime_args(placement, member, head)
    env = {
        "TMPDIR": member_tmpdir(layout),
        **server.env,  # an explicit value wins (e.g. a different TMPDIR)
        # per member, so the playbook's one value (a single container's 127.0.0.1) cannot be it
        "VLLM_HOST_IP": member.address,
    }
    new_server = server.model_copy(
        update={
            "tensor_parallel_size": placement.tensor_parallel_size,
            "extra_args": args,
            "env": env,
        }
    )
    return playbook.model_copy(update={"server": new_server, "container": member.name})


def runtime_args(placement: Placement, member: Member, head: Member) -> list[str]:
    """vLLM's native multi-node flags for one member (``vllm serve --help=ParallelConfig``)."""
    args = []
    if placement.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(placement.pipeline_parallel_size)]
    args += ["--nnodes", str(len(placement.members)), "--node-rank", str(member.rank)]
    args += ["--master-addr", head.address, "--master-port", str(placement.master_port)]
    if member.rank > 0:
        args.append("--headless")
    return args


def placement_record(
    playbook: Playbook, members: list[Member], member: Member
) -> dict[str, object]:
    """What ``placement.json`` says on ``member``: the whole group and this member's role."""
    placement = playbook.placement
    assert placement is not None
    return {
        "playbook": playbook.name,
        "runtime": placement.runtime,
        "role": member.role,
        "rank": member.rank,
        "tensor_parallel_size": placement.tensor_parallel_size,
        "pipeline_parallel_size": placement.pipeline_parallel_size,
        "master_port": placement.master_port,
        "members": [
            {"name": m.name, "rank": m.rank, "address": m.address, "role": m.role} for m in members
        ],
    }


def render_member(
    playbook: Playbook, members: list[Member], member: Member, inputs: RenderInputs
) -> MemberRender:
    """The single-container files for ``member``'s rank, plus its ``placement.json`` and the
    folder its ``TMPDIR`` names."""
    layout = inputs.layout
    book = member_playbook(playbook, member, members[0], layout)
    # the API key goes to the head only: the workers serve no HTTP
    api_key = inputs.api_key if member.rank == 0 else None
    base = render(book, replace(inputs, restart=MEMBER_RESTART, api_key=api_key))
    record = json.dumps(placement_record(playbook, members, member), indent=2) + "\n"
    extra = (
        RenderedFile(placement_file(layout), record.encode()),
        RenderedFile(
            member_tmp_marker(layout),
            b"TMPDIR of this member's vLLM ranks (one per container: never shared)\n",
        ),
    )
    rendered = Rendered(spec=base.spec, files=base.files + extra, supervisor=base.supervisor)
    return MemberRender(member, book, rendered)


def _no_placement_flags(book: str, key: str, given: list[str]) -> None:
    clash = sorted(PLACEMENT_FLAGS.intersection(a.partition("=")[0] for a in given))
    if clash:
        raise PlaybookError(
            f"{key} sets {', '.join(clash)}, which the placement decides",
            source=f"playbook {book}",
            key=key,
            hint="set the split and ports in placement: only",
        )
