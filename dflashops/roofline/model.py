"""The single-stream decode ceiling set by memory bandwidth, and how close a measurement gets.

At batch 1 every verify step streams the (active) weights from GPU memory once, so

    ceiling tok/s = bandwidth × tp / bytes read per step × acceptance length

with bandwidth in decimal GB/s (vendor units), ``tp`` GPUs each reading their own shard in
parallel, and the acceptance length the mean tokens one step emits (1 without speculation). It is
an upper bound: KV-cache reads, the drafter's own reads, the slightly costlier multi-token verify
and a bandwidth utilisation below 100 % (70–85 % is good) all come off it. A measurement *above* it
is almost always a measurement error (tokens counted per chunk, a wrong acceptance length, cached
prompts), and is flagged as one.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.drafter.safetensors import DTYPE_BYTES, read_header, read_weights
from dflashops.errors import DrafterError, TuneInputError

GB = 1e9
VENDOR_SOURCE = "vendor spec value (NVIDIA product datasheet)"


class GpuSpec(BaseModel):
    """One GPU's peak memory bandwidth, as the vendor states it."""

    model_config = ConfigDict(frozen=True)

    name: str
    bandwidth_gbps: float = Field(gt=0, description="decimal GB/s")
    aliases: tuple[str, ...] = Field(default=(), description="normalised nvidia-smi names")
    source: str = VENDOR_SOURCE


GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(name="RTX A6000", bandwidth_gbps=768),
    GpuSpec(name="RTX 3090", bandwidth_gbps=936),
    GpuSpec(name="RTX 4090", bandwidth_gbps=1008),
    GpuSpec(name="A100 40GB", bandwidth_gbps=1555, aliases=("a100sxm440gb", "a100pcie40gb")),
    GpuSpec(name="A100 80GB", bandwidth_gbps=2039, aliases=("a100sxm480gb", "a100sxm80gb")),
    # the PCIe card of the same capacity has slower HBM2e; nvidia-smi names it "A100 80GB PCIe"
    GpuSpec(name="A100 80GB PCIe", bandwidth_gbps=1935, aliases=("a100pcie80gb",)),
    GpuSpec(name="L40S", bandwidth_gbps=864),
    GpuSpec(name="H100 SXM", bandwidth_gbps=3350, aliases=("h10080gbhbm3", "h100sxm580gb")),
    GpuSpec(name="H100 PCIe", bandwidth_gbps=2000, aliases=("h100pcie80gb",)),
    GpuSpec(name="H200", bandwidth_gbps=4800, aliases=("h200sxm141gb",)),
    GpuSpec(name="B200", bandwidth_gbps=8000),
)


def _normalise(name: str) -> str:
    text = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "geforce"):
        text = text.removeprefix(prefix)
    return text


def lookup_gpu(name: str) -> GpuSpec:
    """The table entry for a GPU as a user or ``nvidia-smi`` names it ("A6000", "NVIDIA H200")."""
    wanted = _normalise(name)
    if not wanted:
        raise TuneInputError("empty GPU name", field="gpu")
    keys = {gpu.name: {_normalise(gpu.name), *gpu.aliases} for gpu in GPUS}
    exact = [gpu for gpu in GPUS if wanted in keys[gpu.name]]
    if exact:
        return exact[0]
    partial = [gpu for gpu in GPUS if any(wanted in key for key in keys[gpu.name])]
    if len(partial) == 1:
        return partial[0]
    known = ", ".join(gpu.name for gpu in GPUS)
    if partial:
        names = ", ".join(gpu.name for gpu in partial)
        raise TuneInputError(f"GPU {name!r} is ambiguous: {names}", field="gpu", hint=known)
    raise TuneInputError(
        f"unknown GPU {name!r}",
        field="gpu",
        hint=f"known: {known}; or give --bandwidth-gbps",
    )


class WeightsInfo(BaseModel):
    """What safetensors headers say about a checkpoint, without reading its tensors."""

    model_config = ConfigDict(frozen=True)

    path: str
    files: tuple[str, ...]
    bytes: int = Field(ge=0)
    params: int = Field(ge=0)
    bytes_by_dtype: dict[str, int]


def safetensors_weights(path: Path) -> WeightsInfo:
    """Bytes and parameter count of a ``.safetensors`` file or of a checkpoint directory.

    Headers only, through the drafter checks' reader (a directory's shard index decides which
    files count, so a consolidated copy next to the shards is not counted twice).
    """
    try:
        if path.is_file():
            tensors = list(read_header(path).values())
            files: tuple[str, ...] = (path.name,)
        elif path.is_dir():
            weights = read_weights(path)
            if weights is None:
                raise TuneInputError(f"{path}: no .safetensors files", field="weights")
            tensors, files = list(weights.tensors.values()), weights.files
        else:
            raise TuneInputError(f"{path}: no such file or directory", field="weights")
    except DrafterError as exc:
        raise TuneInputError(exc.one_line(), field="weights") from exc
    by_dtype: dict[str, int] = {}
    params = 0
    for tensor in tensors:
        width = DTYPE_BYTES.get(tensor.dtype)
        if width is None:
            raise TuneInputError(
                f"{path}: tensor {tensor.name!r} has dtype {tensor.dtype}, whose size is unknown",
                field="weights",
                hint="give --weights as a size, e.g. 54GB",
            )
        count = math.prod(tensor.shape)
        params += count
        by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + count * width
    return WeightsInfo(
        path=str(path),
        files=files,
        bytes=sum(by_dtype.values()),
        params=params,
        bytes_by_dtype=by_dtype,
    )


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_COUNT_UNITS = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
# one way to match each digit ("[0-9]*\.?[0-9]+" backtracked quadratically over long digit runs)
_NUMBER_UNIT = re.compile(
    r"^\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE
)
_MAX_NUMBER_TEXT = 64  # "54GB", "5.4e10": a longer text is no size an operator means


def parse_size(text: str, *, field: str = "size") -> int:
    """Bytes from ``54GB`` (decimal, as bandwidth is), ``50GiB``, ``5.4e10`` or ``54000000000``."""
    number, unit = _split(text, "size", field)
    if unit.lower() not in _SIZE_UNITS:
        raise TuneInputError(f"{text!r}: unknown size unit {unit!r}", field=field)
    size = number * _SIZE_UNITS[unit.lower()]
    if not math.isfinite(size):
        raise TuneInputError(f"{text!r} is not a finite size", field=field)
    return round(size)


def parse_count(text: str, *, field: str = "count") -> float:
    """A parameter count from ``3B``, ``800M``, ``3e9`` (or a plain fraction such as ``0.1``)."""
    number, unit = _split(text, "count", field)
    if unit.lower() not in _COUNT_UNITS:
        raise TuneInputError(f"{text!r}: unknown count suffix {unit!r}", field=field)
    count = number * _COUNT_UNITS[unit.lower()]
    if not math.isfinite(count):
        raise TuneInputError(f"{text!r} is not a finite count", field=field)
    return count


def _split(text: str, what: str, field: str) -> tuple[float, str]:
    match = _NUMBER_UNIT.match(text) if len(text) <= _MAX_NUMBER_TEXT else None
    if match is None:
        shown = text if len(text) <= _MAX_NUMBER_TEXT else text[:_MAX_NUMBER_TEXT] + "…"
        raise TuneInputError(f"{shown!r} is not a {what}", field=field)
    number = float(match.group(1))
    if not math.isfinite(number):  # 1e999 reads as inf
        raise TuneInputError(f"{text!r} is not a finite {what}", field=field)
    return number, match.group(2)


class RooflineSpec(BaseModel):
    """The hardware and the bytes one verify step reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str | None = Field(default=None, description="a name from the table, e.g. 'RTX A6000'")
    bandwidth_gbps: float | None = Field(default=None, gt=0, description="overrides the table")
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree")
    weight_bytes: int = Field(gt=0, description="all weights of the target, all shards")
    total_params: int | None = Field(default=None, gt=0, description="from safetensors headers")
    active_fraction: float | None = Field(default=None, gt=0, le=1, description="MoE: active share")
    active_params: float | None = Field(default=None, gt=0, description="MoE: active count")
    extra_bytes_per_step: int = Field(
        default=0, ge=0, description="drafter weights, KV reads: added to every step"
    )

    @model_validator(mode="after")
    def _consistent(self) -> RooflineSpec:
        if self.gpu is None and self.bandwidth_gbps is None:
            raise ValueError("give a GPU or a bandwidth")
        if self.active_fraction is not None and self.active_params is not None:
            raise ValueError("give the active share as a fraction or as a count, not both")
        if self.active_params is not None and self.total_params is None:
            raise ValueError(
                "an active parameter count needs the total count (read from safetensors "
                "headers); with a byte count give the active share as a fraction"
            )
        if (
            self.active_params is not None
            and self.total_params is not None
            and self.active_params > self.total_params
        ):
            raise ValueError("more active parameters than parameters")
        return self


class RooflineResult(BaseModel):
    """The ceiling at one acceptance length, and a measurement against it."""

    model_config = ConfigDict(frozen=True)

    gpu: str | None
    bandwidth_gbps: float
    bandwidth_source: str
    tp: int
    bytes_per_step: int
    active_fraction: float
    ceiling_tok_s_at_al1: float = Field(description="without speculation")
    acceptance_length: float
    ceiling_tok_s: float = Field(description="ceiling_tok_s_at_al1 × acceptance_length")
    measured_tok_s: float | None = None
    fraction_of_ceiling: float | None = None
    implied_bandwidth_gbps: float | None = Field(
        default=None, description="per GPU, if the measurement were bandwidth-bound"
    )
    above_ceiling: bool = False
    warnings: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = (
        "batch 1: each verify step reads the active weights once from GPU memory",
        "tensor parallelism splits the weights evenly; the GPUs read in parallel",
        "KV-cache and activation reads are not counted unless given as extra bytes per step",
        "bandwidth is the vendor peak; real stacks reach roughly 70–85 % of it",
    )


def resolve_bandwidth(gpu: str | None, override_gbps: float | None) -> tuple[float, str]:
    """Bandwidth per GPU in GB/s and where it came from; an override wins over the table."""
    if override_gbps is not None:
        return override_gbps, "given"
    if gpu is None:
        raise TuneInputError("give a GPU or --bandwidth-gbps", field="gpu")
    spec = lookup_gpu(gpu)
    return spec.bandwidth_gbps, f"{spec.name}: {spec.source}"


def decode_ceiling(
    bandwidth_gbps: float, tp: int, bytes_per_step: float, acceptance_length: float = 1.0
) -> float:
    """Tokens per second if every step only streamed its bytes at full bandwidth."""
    if bandwidth_gbps <= 0 or tp < 1 or bytes_per_step <= 0 or acceptance_length < 1:
        raise TuneInputError("roofline needs positive bandwidth, tp, bytes and AL ≥ 1")
    return bandwidth_gbps * GB * tp / bytes_per_step * acceptance_length


def step_bytes(spec: RooflineSpec) -> tuple[int, float]:
    """Bytes one step reads and the active share of the weights it assumed."""
    fraction = 1.0
    if spec.active_fraction is not None:
        fraction = spec.active_fraction
    elif spec.active_params is not None and spec.total_params is not None:
        fraction = spec.active_params / spec.total_params
    return round(spec.weight_bytes * fraction) + spec.extra_bytes_per_step, fraction


def roofline(
    spec: RooflineSpec, *, acceptance_length: float = 1.0, measured_tok_s: float | None = None
) -> RooflineResult:
    """The ceiling for ``spec`` at ``acceptance_length``, and where ``measured_tok_s`` falls."""
    bandwidth, source = resolve_bandwidth(spec.gpu, spec.bandwidth_gbps)
    per_step, fraction = step_bytes(spec)
    base = decode_ceiling(bandwidth, spec.tp, per_step)
    ceiling = base * acceptance_length
    warnings: list[str] = []
    share = implied = None
    above = False
    if measured_tok_s is not None:
        share = measured_tok_s / ceiling
        implied = measured_tok_s / acceptance_length * per_step / spec.tp / GB
        above = measured_tok_s > ceiling
        if above:
            warnings.append(
                f"measured {measured_tok_s:.1f} tok/s is above the ceiling {ceiling:.1f} tok/s "
                f"(it would need {implied:.0f} GB/s per GPU, the GPU has {bandwidth:.0f}): likely "
                "a measurement error: tokens counted per chunk, a wrong acceptance length, "
                "cached prompts, or wrong weights/tp"
            )
    return RooflineResult(
        gpu=spec.gpu,
        bandwidth_gbps=bandwidth,
        bandwidth_source=source,
        tp=spec.tp,
        bytes_per_step=per_step,
        active_fraction=fraction,
        ceiling_tok_s_at_al1=base,
        acceptance_length=acceptance_length,
        ceiling_tok_s=ceiling,
        measured_tok_s=measured_tok_s,
        fraction_of_ceiling=share,
        implied_bandwidth_gbps=implied,
        above_ceiling=above,
        warnings=tuple(warnings),
    )
