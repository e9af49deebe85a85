"""Facts for the rules, from a live container: one SSH connection and the server's HTTP port.

1. the process: its pid, command line and a few environment variables (``/proc``), and
   ``deployed.json``;
2. the drafter the process loads (the speculative config's ``model``): its ``config.json``, and
   the registry entry (the playbook's ``drafter.ref``, else the one its files match);
3. acceptance: two ``/metrics`` scrapes ``window_s`` apart; when that window saw too few drafts
   (an idle server), a short probe at concurrency 1 through ``bench`` (the playbook's workload,
   a few requests), which also gives the single-stream decode rate;
4. the server log's last ``LOG_TAIL_BYTES`` (stats lines: KV cache usage, preemptions);
5. on a GPU host, ``nvidia-smi`` (state and P2P) and the roofline's weights;
6. on a placement member, every member's server and network (:mod:`.members`).

Nothing here changes the server. A fact that cannot be read becomes a note, and the rule that
needs it says "skipped".
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from dflashops.bench.container import bench_container, read_deployment
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.roofline import plan_roofline, probe_roofline_facts
from dflashops.bench.server_log import RemoteServerLog
from dflashops.bench.settings import BenchSettings
from dflashops.bench.target import resolve_target
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.doctor.drafter_check import check_drafter
from dflashops.doctor.facts import (
    Acceptance,
    DoctorFacts,
    DrafterFacts,
    GpuFacts,
    RunningBatch,
    ServerCounters,
)
from dflashops.doctor.members import gather_placement
from dflashops.doctor.nvidia import P2P_QUERY, QUERY, parse_p2p, parse_query
from dflashops.doctor.rules_tune_load import find_load_model
from dflashops.drafter.fetch import fetch_model_meta
from dflashops.drafter.files import read_drafter
from dflashops.drafter.registry import load_registry
from dflashops.errors import DflashopsError
from dflashops.launch.status import read_placement, server_status
from dflashops.metrics.logs import parse_log
from dflashops.metrics.prometheus import Scrape
from dflashops.metrics.spec_decode import SpecDecodeCounters, delta
from dflashops.progress import Say, quiet
from dflashops.roofline.request import RooflineRequest
from dflashops.server.argv import flag_value

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook
    from dflashops.remote import SshConnection

LOG_TAIL_BYTES = 512 * 1024
MIN_LIVE_DRAFTS = 50
PROBE_REQUESTS = 3
PROBE_MAX_TOKENS = 256
BATCH_SAMPLES = 5  # /metrics scrapes spread over the window, for the running batch
# environment variables of the engine process that change how it drafts (never secrets)
ENV_NAMES = ("VLLM_USE_V2_MODEL_RUNNER", "NCCL_P2P_DISABLE", "VLLM_ATTENTION_BACKEND")


def gather(
    inventory: Inventory,
    name: str,
    conn: SshConnection,
    playbook: Playbook | None,
    *,
    window_s: float = 10.0,
    probe: bool | None = None,
    say: Say = quiet,
    layout: Layout = DEFAULT_LAYOUT,
) -> DoctorFacts:
    """Every fact the rules read. ``probe``: None probes only an idle server, True always,
    False never."""
    facts = DoctorFacts(container=name)
    say(f"{name}: reading the server process and deployed.json")
    status = server_status(conn, layout)
    manifest, note = read_deployment(conn, layout)
    facts.manifest = manifest
    if note:
        facts.notes.append(note)
    facts.engine = status.engine
    facts.engine_version = status.engine_version
    facts.speculative_config = status.speculative_config
    facts.strays = list(status.strays)
    if manifest is not None:
        facts.device = "cuda" if manifest.spec.get("expect_cuda", True) else "cpu"
    elif playbook is not None:
        facts.device = playbook.server.device
    if status.running and status.pid:
        facts.running_argv, facts.running_env = _process(conn, status.pid)
    _workload(facts, playbook)
    facts.load_model, _ = find_load_model(name, Path.cwd())  # where `tune --load` saves
    _drafter(facts, conn, playbook)
    facts.drafter_check, facts.drafter_check_note = check_drafter(
        conn, playbook, facts.container, facts.method
    )
    if facts.running_argv is not None:
        _acceptance(
            facts,
            inventory=inventory,
            conn=conn,
            playbook=playbook,
            window_s=window_s,
            probe=probe,
            say=say,
            layout=layout,
        )
        _log(facts, conn, layout)
    if facts.device == "cuda":
        say(f"{name}: nvidia-smi")
        _gpus(facts, conn, playbook)
    record = read_placement(conn, layout)
    if record is not None:
        say(f"{name}: reading every member of placement {record.get('playbook')}")
        facts.placement = gather_placement(inventory, name, conn, record, layout=layout)
    return facts


def _process(conn: SshConnection, pid: int) -> tuple[list[str] | None, dict[str, str]]:
    names = "|".join(ENV_NAMES)
    script = (
        f"tr '\\0' '\\n' < /proc/{pid}/cmdline | base64 -w0; echo; "
        f"tr '\\0' '\\n' < /proc/{pid}/environ 2>/dev/null | grep -E '^({names})=' || true"
    )
    result = conn.probe(script)
    if not result.ok:
        return None, {}
    first, _, rest = result.stdout.partition("\n")
    try:
        argv = base64.b64decode(first.strip()).decode("utf-8", "replace").split("\n")
    except (binascii.Error, ValueError):
        return None, {}
    env = {}
    for line in rest.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ENV_NAMES:
            env[key] = value
    if argv and argv[-1] == "":
        argv.pop()  # the newline tr wrote for the final NUL
    return argv or None, env


def _workload(facts: DoctorFacts, playbook: Playbook | None) -> None:
    """What thinking mode clients ask for: the playbook's bench.thinking, else the server's
    ``--default-chat-template-kwargs``."""
    if playbook is not None and playbook.bench.thinking is not None:
        facts.workload_thinking = playbook.bench.thinking
        facts.workload_source = f"playbook {playbook.name} bench.thinking"
        return
    raw = flag_value(facts.running_argv or [], "--default-chat-template-kwargs")
    if raw:
        try:
            kwargs = json.loads(raw)
        except ValueError:
            return
        if isinstance(kwargs, dict) and isinstance(kwargs.get("enable_thinking"), bool):
            facts.workload_thinking = kwargs["enable_thinking"]
            facts.workload_source = "the server's --default-chat-template-kwargs"


def _drafter(facts: DoctorFacts, conn: SshConnection, playbook: Playbook | None) -> None:
    config = facts.speculative_config or {}
    path = config.get("model")
    if not isinstance(path, str) or not path.startswith("/"):
        if facts.method not in (None, "none", "ngram"):
            facts.notes.append("the speculative config names no drafter folder in the container")
        return
    registry = load_registry()
    with tempfile.TemporaryDirectory(prefix="dflashops-doctor-") as tmp:
        local = Path(tmp) / "drafter"
        try:
            fetch_model_meta(conn, path, local, weights=False)
            raw = json.loads((local / "config.json").read_text(encoding="utf-8"))
        except (DflashopsError, ValueError, OSError) as exc:
            facts.notes.append(f"{path}/config.json not read: {exc}")
            return
        if not isinstance(raw, dict):
            facts.notes.append(f"{path}/config.json is not a JSON object")
            return
        facts.drafter = DrafterFacts(path=path, config=raw)
        ref = playbook.drafter.ref if playbook is not None else None
        try:
            if ref:
                facts.entry = registry.resolve(ref)
            else:
                match = registry.match(read_drafter(str(local)))
                facts.entry = match.entry if match else None
        except DflashopsError as exc:
            facts.notes.append(f"registry: {exc.one_line()}")
    if facts.entry is None:
        facts.notes.append("no registry entry matches the drafter: no reference to compare with")


def _endpoint(
    facts: DoctorFacts, inventory: Inventory, playbook: Playbook | None, layout: Layout
) -> Endpoint:
    target = resolve_target(
        facts.container,
        inventory.container(facts.container),
        playbook,
        facts.manifest,
        environ=os.environ,
        log_path=layout.log,
    )
    return target.endpoint


def _scrape(client: httpx.Client, endpoint: Endpoint) -> Scrape | None:
    try:
        reply = client.get(endpoint.url("/metrics"))
    except httpx.HTTPError:
        return None
    return Scrape.parse(reply.text) if reply.status_code == 200 else None


def _acceptance(
    facts: DoctorFacts,
    *,
    inventory: Inventory,
    conn: SshConnection,
    playbook: Playbook | None,
    window_s: float,
    probe: bool | None,
    say: Say,
    layout: Layout,
) -> None:
    try:
        endpoint = _endpoint(facts, inventory, playbook, layout)
    except DflashopsError as exc:
        facts.notes.append(f"no endpoint: {exc.one_line()}")
        return
    with httpx.Client(headers=endpoint.headers(), timeout=30.0) as client:
        before = _scrape(client, endpoint)
        if before is None:
            facts.notes.append(f"{endpoint.root()}/metrics not readable")
            return
        idle = (before.total("vllm:num_requests_running") or 0.0) == 0.0
        after = before
        window: list[Scrape | None] = [before]
        if probe is not True and not (probe is None and idle):
            say(f"{facts.container}: watching /metrics for {window_s:g} s")
            for _ in range(BATCH_SAMPLES):
                time.sleep(window_s / BATCH_SAMPLES)
                window.append(_scrape(client, endpoint))
            after = next((s for s in reversed(window) if s is not None), before)
            live = _delta(before, after)
            if live is not None and (live.num_drafts or 0) >= MIN_LIVE_DRAFTS:
                facts.acceptance = Acceptance(
                    k=facts.k,
                    per_position=tuple(live.per_position_acceptance),
                    acceptance_length=live.acceptance_length,
                    num_drafts=live.num_drafts or 0,
                    source=f"live traffic over {window_s:g} s (/metrics deltas)",
                )
        # the window only: a probe's own requests are not the server's load
        facts.running_batch = RunningBatch.from_scrapes(
            window, f"/metrics, {len(window)} scrapes over {window_s:g} s"
        )
        if facts.acceptance is None and probe is not False:
            _probe(facts, inventory, conn, playbook, say)
            after = _scrape(client, endpoint) or after
        elif facts.acceptance is None:
            facts.notes.append("too few drafts in the window and --no-probe: acceptance unknown")
    facts.counters = _counters(before, after)


def _delta(before: Scrape, after: Scrape) -> Any:
    try:
        return delta(SpecDecodeCounters.from_scrape(before), SpecDecodeCounters.from_scrape(after))
    except DflashopsError:
        return None


def _probe(
    facts: DoctorFacts,
    inventory: Inventory,
    conn: SshConnection,
    playbook: Playbook | None,
    say: Say,
) -> None:
    max_tokens = min(playbook.bench.max_tokens, PROBE_MAX_TOKENS) if playbook else PROBE_MAX_TOKENS
    settings = BenchSettings.from_playbook(
        playbook,
        concurrency=[1],
        requests=PROBE_REQUESTS,
        warmup_requests=1,
        max_tokens=max_tokens,
        label="doctor probe",
    )
    say(f"{facts.container}: probing with {PROBE_REQUESTS} requests ({settings.workload.name})")
    try:
        report = bench_container(inventory, facts.container, playbook, settings, connection=conn)
    except DflashopsError as exc:
        facts.notes.append(f"probe failed: {exc.one_line()}")
        return
    level = report.levels[0]
    rates = level.spec_decode_per_position_acceptance_rates or []
    facts.acceptance = Acceptance(
        k=facts.k,
        per_position=tuple(rates),
        acceptance_length=level.spec_decode_acceptance_length,
        num_drafts=level.spec_decode_num_drafts or 0,
        source=f"doctor probe: {level.completed} request(s) of {settings.workload.name} at "
        "concurrency 1",
        decode_tok_s=1000.0 / level.mean_tpot_ms if level.mean_tpot_ms else None,
        workload=settings.workload.name,
    )


def _counters(before: Scrape, after: Scrape) -> ServerCounters:
    usage = after.total("vllm:kv_cache_usage_perc")
    if usage is None:
        usage = after.total("vllm:gpu_cache_usage_perc")  # before vLLM 0.10
    preempted = None
    first, last = (
        before.total("vllm:num_preemptions_total"),
        after.total("vllm:num_preemptions_total"),
    )
    if first is not None and last is not None and last >= first:
        preempted = round(last - first)
    prefix = None
    for sample in after.samples("vllm:cache_config_info"):
        flag = sample.labels.get("enable_prefix_caching")
        if flag in ("True", "False"):
            prefix = flag == "True"
    return ServerCounters(
        kv_cache_usage=usage,
        preemptions=preempted,
        requests_waiting=after.total("vllm:num_requests_waiting"),
        prefix_caching=prefix,
    )


def _log(facts: DoctorFacts, conn: SshConnection, layout: Layout) -> None:
    log = RemoteServerLog(conn, layout.log)
    try:
        size = log.size()
        read = log.read_from(max(0, size - LOG_TAIL_BYTES))
    except DflashopsError as exc:
        facts.notes.append(f"server log not read: {exc.one_line()}")
        return
    facts.log = parse_log(read.text)


def _gpus(facts: DoctorFacts, conn: SshConnection, playbook: Playbook | None) -> None:
    result = conn.probe(QUERY)
    gpus = parse_query(result.stdout) if result.ok else []
    if not gpus:
        said = (result.stderr or result.stdout).strip().splitlines()
        facts.gpu_problem = f"`{QUERY.split(' ', 1)[0]}` gave no GPU state" + (
            f" ({said[0]})" if said else ""
        )
    else:
        p2p = conn.probe(P2P_QUERY)
        busy = any((g.utilization_pct or 0) >= 50 for g in gpus)
        facts.gpu = GpuFacts(
            gpus=tuple(gpus), p2p=parse_p2p(p2p.stdout) if p2p.ok else {}, sampled_under_load=busy
        )
    model_dir = str(facts.manifest.spec.get("model") or "") if facts.manifest else ""
    if not model_dir.startswith("/") and playbook is not None:
        model_dir = str(playbook.model.path)
    roof = probe_roofline_facts(
        conn, model_dir=model_dir if model_dir.startswith("/") else None, query_gpus=True
    )
    plan = plan_roofline(RooflineRequest(), roof, device="cuda", tp=facts.tensor_parallel)
    facts.roofline = plan.spec
    facts.roofline_note = "; ".join(plan.notes) or None
