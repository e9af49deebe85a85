"""The opt-in collective check of preflight: one all-reduce across the tensor-parallel GPUs,
before the engine spends minutes loading a model.

A TP=2 launch that hangs in NCCL (peer-to-peer broken by the host's IOMMU or ACS, a container
without the right device nodes, NVLink multicast on a platform that lacks it) does so only after
the weights are loaded. This check runs the same collective the engine's first forward pass
runs, on its own: one process per GPU, ``torch.distributed`` with NCCL (gloo on the CPU, which
is how the tests run it), a tensor whose reduced value is known, and a deadline. It reports
whether the sum came back right and the bus bandwidth, computed as nccl-tests does
(``busbw = algbw * 2 (n - 1) / n``), so two hosts' numbers compare.

torch is imported inside the worker only: preflight stays standard library for engines that
are not checked this way.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_BYTES = 256 * 2**20  # large enough that the bandwidth, not the latency, is measured
DEFAULT_TIMEOUT_S = 120.0
TIMED_ROUNDS = 5
# NCCL's NVLink multicast (NVLS) hangs or fails on hosts whose fabric lacks it; the operator's
# environment may turn it on deliberately, otherwise it stays off for the check as for the engine
NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass(frozen=True)
class CollectiveResult:
    """One all-reduce check: whether every rank got the right sum, and how fast."""

    ok: bool
    backend: str
    world_size: int
    bytes: int
    detail: str
    seconds: float | None = None  # mean of the timed rounds
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in GB/s of an all-reduce of ``nbytes`` taking ``seconds``.

    The bus figure is what each link carries in a ring all-reduce, nccl-tests' ``busbw``: it is
    comparable across world sizes, and close to the link's peak on a healthy host.
    """
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


@dataclass(frozen=True)
class _Job:
    """What every rank is told (picklable: the ranks are spawned processes)."""

    backend: str
    world_size: int
    nbytes: int
    port: int
    out: str
    env: dict[str, str]


def all_reduce_check(
    world_size: int,
    *,
    backend: str = "nccl",
    nbytes: int = DEFAULT_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    environ: dict[str, str] | None = None,
) -> CollectiveResult:
    """Run one all-reduce across ``world_size`` processes (GPU ``rank`` each with NCCL).

    Never raises for what the collective does: a wrong sum, a worker that dies and a hang past
    ``timeout_s`` are each a failed result with the reason, and hung workers are killed.
    """
    env = {**NVLS_OFF, **(os.environ if environ is None else environ)}
    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
    with tempfile.TemporaryDirectory(prefix="dflashops-collective-") as tmp:
        job = _Job(backend, world_size, nbytes, _free_port(), tmp, env)
        workers = [
            ctx.Process(target=_worker, args=(rank, job), daemon=True) for rank in range(world_size)
        ]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + timeout_s
        for worker in workers:
            worker.join(max(deadline - time.monotonic(), 0.0))
        hung = [rank for rank, w in enumerate(workers) if w.is_alive()]
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(5)
        answers = [_read_answer(Path(tmp), rank) for rank in range(world_size)]
    if hung:
        return _failed(
            job,
            f"all-reduce across {world_size} ranks did not finish in {timeout_s:g}s "
            f"(ranks {', '.join(map(str, hung))} still waiting): a hang like this in the engine "
            "comes after the model load; try NCCL_P2P_DISABLE=1, and check the GPUs' peer "
            "access and the host's IOMMU/ACS settings",
        )
    return _verdict(job, answers, [w.exitcode for w in workers])


def _failed(job: _Job, detail: str) -> CollectiveResult:
    return CollectiveResult(False, job.backend, job.world_size, job.nbytes, detail)


def _verdict(
    job: _Job, answers: list[dict[str, Any] | None], exit_codes: list[int | None]
) -> CollectiveResult:
    """The result from every rank's answer: each must have summed right."""
    for rank, answer in enumerate(answers):
        if answer is None:
            return _failed(job, f"rank {rank} exited {exit_codes[rank]} without an answer")
        if answer.get("error"):
            return _failed(job, f"rank {rank}: {answer['error']}")
    expected = job.world_size * (job.world_size + 1) / 2  # rank r contributes r + 1
    for rank, answer in enumerate(answers):
        if answer is not None and answer.get("value") != expected:
            return _failed(
                job,
                f"rank {rank} got {answer.get('value')} from the all-reduce, expected "
                f"{expected:g}: the collective corrupts data",
            )
    seconds = max(float(a["seconds"]) for a in answers if a is not None)
    algbw, busbw = bus_bandwidth(job.nbytes, seconds, job.world_size)
    return CollectiveResult(
        True,
        job.backend,
        job.world_size,
        job.nbytes,
        f"{job.world_size} ranks, {job.nbytes / 2**20:.0f} MiB: sum right, "
        f"{seconds * 1e3:.2f} ms, bus bandwidth {busbw:.1f} GB/s",
        seconds=seconds,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_answer(folder: Path, rank: int) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / f"rank{rank}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _worker(rank: int, job: _Job) -> None:
    """One rank: join the group, reduce a tensor of (rank + 1), time a few rounds, answer."""
    os.environ.update(job.env)
    answer: dict[str, Any]
    try:
        answer = _reduce(rank, job)
    except Exception as exc:  # the parent reports it; a traceback here would go nowhere useful
        answer = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    Path(job.out, f"rank{rank}.json").write_text(json.dumps(answer), encoding="utf-8")


def _reduce(rank: int, job: _Job) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    cuda = job.backend == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        job.backend,
        init_method=f"tcp://127.0.0.1:{job.port}",
        rank=rank,
        world_size=job.world_size,
    )
    try:
        n = max(job.nbytes // 4, 1)

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize(device)

        tensor = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor)  # checked, and the warm-up round (connections are set up here)
        sync()
        value = float(tensor[0].item())
        uniform = bool(torch.all(tensor == tensor[0]).item())
        started = time.perf_counter()
        for _ in range(TIMED_ROUNDS):
            dist.all_reduce(tensor)
        sync()
        seconds = (time.perf_counter() - started) / TIMED_ROUNDS
        return {"value": value if uniform else None, "seconds": seconds}
    finally:
        dist.destroy_process_group()
