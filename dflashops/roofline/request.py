"""What an operator asks of the roofline (``--gpu``, ``--bandwidth-gbps``, ``--tp``, ``--weights``,
``--active-params``, ``--extra-bytes``), turned into a ``RooflineSpec``.

``tune-offline`` needs every hardware fact from the request. ``bench NAME`` probes the container
for the GPU name and the weights' size and lets the request override each of them, so the
builder takes probed values as fallbacks.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflashops.errors import TuneInputError
from dflashops.pydantic_errors import first_error
from dflashops.roofline.model import RooflineSpec, parse_count, parse_size, safetensors_weights


class RooflineRequest(BaseModel):
    """The roofline options as given; ``None`` means "not given"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str | None = None
    bandwidth_gbps: float | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, ge=1)
    weights: str | None = Field(default=None, description="a local safetensors file/dir or a size")
    active_params: str | None = Field(default=None, description="MoE: a share (0.1) or count (3B)")
    extra_bytes: str | None = None

    @property
    def names_hardware(self) -> bool:
        return self.gpu is not None or self.bandwidth_gbps is not None

    def given_options(self) -> list[str]:
        """Every roofline option given, as the command line spells it."""
        hardware = {"--gpu": self.gpu, "--bandwidth-gbps": self.bandwidth_gbps}
        return [name for name, value in hardware.items() if value is not None] + (
            self.stray_options()
        )

    def stray_options(self) -> list[str]:
        """Options given that only mean something once a GPU or bandwidth is known."""
        given = {
            "--tp": self.tp,
            "--weights": self.weights,
            "--active-params": self.active_params,
            "--extra-bytes": self.extra_bytes,
        }
        return [name for name, value in given.items() if value is not None]


class WeightSize(BaseModel):
    """Bytes one step reads (all of the target's weights) and where the number came from."""

    model_config = ConfigDict(frozen=True)

    bytes: int = Field(gt=0)
    params: int | None = None
    source: str


def weights_from_text(text: str) -> WeightSize:
    """``--weights``: an existing local path (safetensors headers) or a size such as ``54GB``."""
    if _is_path(text):
        info = safetensors_weights(Path(text))
        if info.bytes <= 0:
            raise TuneInputError(f"{text}: the safetensors files hold no tensors", field="weights")
        return WeightSize(
            bytes=info.bytes,
            params=info.params or None,
            source=f"safetensors headers of {text} ({len(info.files)} file(s))",
        )
    return WeightSize(bytes=parse_size(text, field="weights"), source=f"given: {text}")


def _is_path(text: str) -> bool:
    """Whether ``text`` names an existing path (a size such as ``54GB`` usually does not); a
    text no file could be named (too long, a NUL byte) is not one, rather than an OSError."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def roofline_spec(
    request: RooflineRequest,
    *,
    weights: WeightSize | None = None,
    gpu: str | None = None,
    tp: int | None = None,
) -> RooflineSpec:
    """The spec from ``request``; ``weights``, ``gpu`` and ``tp`` are used where it is silent."""
    if not request.names_hardware and gpu is None:
        raise TuneInputError("the roofline needs a GPU or a bandwidth", field="gpu")
    if request.weights is not None:
        weights = weights_from_text(request.weights)
    if weights is None:
        raise TuneInputError("the roofline needs the weights' size", field="weights")
    fraction = count = None
    if request.active_params is not None:
        value = parse_count(request.active_params, field="active-params")
        if value <= 1:
            fraction = value
        else:
            count = value
    extra = request.extra_bytes
    try:
        return RooflineSpec(
            gpu=request.gpu or (None if request.bandwidth_gbps else gpu),
            bandwidth_gbps=request.bandwidth_gbps,
            tp=request.tp or tp or 1,
            weight_bytes=weights.bytes,
            total_params=weights.params,
            active_fraction=fraction,
            active_params=count,
            extra_bytes_per_step=parse_size(extra, field="extra-bytes") if extra else 0,
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        reason = first_error(exc)[1] if isinstance(exc, ValidationError) else str(exc)
        raise TuneInputError(reason, field="active-params") from exc
