"""The bandwidth roofline of a benchmarked server: facts → plan → the report's ``roofline``.

- facts: what the container says, over the bench's SSH connection: its GPUs' names
  (``nvidia-smi``) and the size of the target's ``.safetensors`` files (``find -L``: a hub
  cache's symlinks count as their blobs; with a shard index, only the files it names).
- plan: the ``RooflineSpec`` from the facts, the playbook's tensor-parallel degree and whatever
  the operator gave (``--gpu``, ``--bandwidth-gbps``, ``--tp``, ``--weights`` override each fact),
  or the reason there is none (a CPU server, no weights found).
- attach: the ceiling at the concurrency-1 level's acceptance length, the fraction of it that
  level's decode rate (1000 / mean TPOT) reached, and the above-ceiling warning.

Nothing here fails a benchmark: a missing fact becomes a note saying what to give instead.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dflashops.bench.models import BenchReport
from dflashops.bench.stopped import BenchInterrupted
from dflashops.errors import RemoteError, TuneInputError
from dflashops.remote import SshConnection, get_bytes
from dflashops.roofline.model import RooflineSpec, roofline
from dflashops.roofline.request import RooflineRequest, WeightSize, roofline_spec
from dflashops.server.argv import flag_value

GPU_QUERY = "nvidia-smi --query-gpu=name --format=csv,noheader"
SHARD_INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 16 * 2**20
SINGLE_STREAM = 1
MEASURED_AS = "1000 / mean TPOT at concurrency 1 (single-stream decode rate)"


@dataclass(frozen=True)
class RooflineFacts:
    """What the container reported; ``problems`` says what could not be found, and why."""

    gpus: tuple[str, ...] = ()
    weights: WeightSize | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class RooflinePlan:
    """The spec to evaluate (None: no roofline), where each input came from, and notes."""

    spec: RooflineSpec | None
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def gpu_names(stdout: str) -> tuple[str, ...]:
    """``nvidia-smi --query-gpu=name --format=csv,noheader``: one name per line."""
    return tuple(line.strip() for line in stdout.splitlines() if line.strip())


def weights_from_listing(
    listing: str, index_text: str | None, *, model_dir: str
) -> tuple[WeightSize | None, str | None]:
    """Size of the weights from ``find -printf '%s\\t%f\\n'`` lines; a shard index limits the
    files counted to those it names (a consolidated copy next to the shards is not counted)."""
    sizes: dict[str, int] = {}
    for line in listing.splitlines():
        size, _, name = line.partition("\t")
        if name and size.isdigit():
            sizes[name] = int(size)
    if index_text is not None:
        try:
            named = set(json.loads(index_text)["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            return None, f"{model_dir}/{SHARD_INDEX}: no weight_map; weights not sized"
        missing = sorted(named - sizes.keys())
        if missing:
            return None, f"{model_dir}: shard {missing[0]} named by the index is missing"
        sizes = {name: sizes[name] for name in named}
    if not sizes:
        return None, f"{model_dir}: no .safetensors files"
    return (
        WeightSize(
            bytes=sum(sizes.values()),
            source=f"safetensors file sizes in {model_dir} ({len(sizes)} file(s))",
        ),
        None,
    )


def probe_roofline_facts(
    conn: SshConnection, *, model_dir: str | None, query_gpus: bool
) -> RooflineFacts:
    """GPU names (when ``query_gpus``) and the weights' size in ``model_dir``, over ``conn``."""
    problems: list[str] = []
    gpus: tuple[str, ...] = ()
    if query_gpus:
        result = conn.probe(GPU_QUERY)
        gpus = gpu_names(result.stdout) if result.ok else ()
        if not gpus:
            said = (result.stderr or result.stdout).strip().splitlines()
            problems.append(
                f"`{GPU_QUERY}` in {conn.name} failed (exit {result.exit_code}"
                f"{': ' + said[0] if said else ''}); give --gpu NAME or --bandwidth-gbps"
            )
    weights = None
    if model_dir is not None:
        # find takes a leading "-" for an expression (-delete): a start point never begins so
        quoted = shlex.quote(model_dir if model_dir.startswith("/") else f"./{model_dir}")
        listing = conn.probe(
            f"find -L {quoted} -maxdepth 1 -type f -name '*.safetensors' -printf '%s\\t%f\\n'"
        )
        index_path = f"{model_dir.rstrip('/')}/{SHARD_INDEX}"
        try:
            index_text = (
                get_bytes(conn, index_path, max_bytes=MAX_INDEX_BYTES).decode()
                if conn.probe(f"test -f {shlex.quote(index_path)}").ok
                else None
            )
        except (RemoteError, UnicodeDecodeError) as exc:
            problems.append(f"{index_path}: cannot read ({exc}); give --weights SIZE")
        else:
            weights, problem = weights_from_listing(
                listing.stdout if listing.ok else "", index_text, model_dir=model_dir
            )
            if problem:
                problems.append(f"{problem}; give --weights SIZE")
    return RooflineFacts(gpus=gpus, weights=weights, problems=tuple(problems))


def tp_from_argv(argv: Sequence[str]) -> int | None:
    """The tensor-parallel degree a server command line asks for (vLLM's or SGLang's flag)."""
    for flag in ("--tensor-parallel-size", "-tp", "--tp-size", "--tp"):
        value = flag_value(argv, flag)
        if value is not None and value.isdigit() and int(value) >= 1:
            return int(value)
    return None


def plan_roofline(
    request: RooflineRequest,
    facts: RooflineFacts | None,
    *,
    device: str = "cuda",
    tp: int | None = None,
    tp_source: str = "playbook",
) -> RooflinePlan:
    """The spec from the operator's request and the probed facts (the request wins)."""
    notes = list(facts.problems if facts else ())
    if not request.names_hardware and device != "cuda":
        return RooflinePlan(
            spec=None,
            notes=(
                f"no roofline: the server runs on {device}; give --bandwidth-gbps for its "
                "memory bandwidth to get one",
            ),
        )
    gpu = None
    sources: dict[str, str] = {}
    if request.bandwidth_gbps is not None:
        sources["bandwidth"] = "--bandwidth-gbps"
    elif request.gpu is not None:
        gpu, sources["gpu"] = request.gpu, "--gpu"
    elif facts and facts.gpus:
        gpu, sources["gpu"] = facts.gpus[0], "nvidia-smi"
        if len(set(facts.gpus)) > 1:
            notes.append(f"mixed GPUs {sorted(set(facts.gpus))}: the roofline uses {gpu}")
    if request.tp is not None:
        sources["tp"] = "--tp"
    elif tp is not None:
        sources["tp"] = tp_source
    weights = facts.weights if facts else None
    if request.weights is None and weights is not None:
        sources["weights"] = weights.source
    try:
        spec = roofline_spec(request, weights=weights, gpu=gpu, tp=tp)
        roofline(spec)  # looks the GPU up: an unknown name is a note now, not an error later
    except TuneInputError as exc:
        return RooflinePlan(spec=None, notes=(*notes, f"no roofline: {exc.one_line()}"))
    if request.weights is not None:
        sources["weights"] = "--weights"
    return RooflinePlan(spec=spec, sources=sources, notes=tuple(notes))


def with_roofline(run: Callable[[], BenchReport], plan: RooflinePlan | None) -> BenchReport:
    """``run()``'s report with the roofline attached; a run the server stopped answering
    carries its partial report with the roofline too (the concurrency-1 level may be whole)."""
    try:
        report = run()
    except BenchInterrupted as stop:
        if plan is None:
            raise
        raise BenchInterrupted(attach_roofline(stop.report, plan)) from stop
    return report if plan is None else attach_roofline(report, plan)


def attach_roofline(report: BenchReport, plan: RooflinePlan) -> BenchReport:
    """``report`` with its ``roofline`` section (and any warning), or with the plan's notes."""
    notes = [*report.notes, *plan.notes]
    if plan.spec is None:
        return report.model_copy(update={"notes": notes})
    level = report.level(SINGLE_STREAM)
    if level is not None and level.incomplete:
        notes.append("roofline: the concurrency-1 level is incomplete: no fraction of the ceiling")
        level = None
    length = (level.spec_decode_acceptance_length if level else None) or 1.0
    measured = 1000 / level.mean_tpot_ms if level and level.mean_tpot_ms else None
    result = roofline(plan.spec, acceptance_length=length, measured_tok_s=measured)
    section: dict[str, Any] = {
        **result.model_dump(mode="json"),
        "concurrency": SINGLE_STREAM,
        "measured_as": MEASURED_AS,
        "sources": plan.sources,
    }
    if level is None and report.level(SINGLE_STREAM) is None:
        notes.append("roofline: no concurrency-1 level, so no fraction of the ceiling")
    return report.model_copy(
        update={
            "roofline": section,
            "notes": notes,
            "warnings": [*report.warnings, *result.warnings],
        }
    )
