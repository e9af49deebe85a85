"""``nvidia-smi`` output read into facts: one query per GPU state, and the P2P matrix.

The query is ``QUERY`` (csv, no header, no units), one line per GPU; ``[N/A]`` or
``[Not Supported]`` becomes None. ``nvidia-smi topo -p2p r`` prints a matrix of read
peer-to-peer status (``OK``, ``NS``, ``CNS``…; ``X`` on the diagonal), with terminal escapes
around the header. Fixtures: ``tests/fixtures/doctor/real-h200-*`` were recorded on an H200.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FIELDS = (
    "index",
    "name",
    "utilization.gpu",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "clocks.max.mem",
    "power.draw",
    "power.limit",
    "power.default_limit",
    "power.max_limit",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_throttle_reasons.active",
)
QUERY = f"nvidia-smi --query-gpu={','.join(FIELDS)} --format=csv,noheader,nounits"
P2P_QUERY = "nvidia-smi topo -p2p r"

# clocks_throttle_reasons bits (nvml's nvmlClocksEventReasons); GPU idle (0x1) and the
# application-clock setting (0x2) are not problems, nor is the power cap at full compute load
REASONS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
HARMFUL_REASONS = 0x8 | 0x20 | 0x40 | 0x80
_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class GpuState:
    """One GPU as ``QUERY`` saw it (None: the driver did not report the value)."""

    index: int
    name: str
    utilization_pct: float | None
    sm_clock_mhz: float | None
    sm_clock_max_mhz: float | None
    mem_clock_mhz: float | None
    mem_clock_max_mhz: float | None
    power_draw_w: float | None
    power_limit_w: float | None
    power_default_limit_w: float | None
    power_max_limit_w: float | None
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    throttle_reasons: int | None

    @property
    def reasons(self) -> list[str]:
        bits = self.throttle_reasons or 0
        return [name for bit, name in REASONS.items() if bits & bit]


def _number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # [N/A], [Not Supported], [Unknown Error]


def _int(text: str) -> int | None:
    value = _number(text)
    return None if value is None else int(value)


def parse_query(stdout: str) -> list[GpuState]:
    """Lines of ``QUERY`` output; a line with another number of fields is skipped."""
    gpus = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(FIELDS):
            continue
        reasons = parts[15]
        try:
            bits = int(reasons, 16) if reasons.lower().startswith("0x") else None
        except ValueError:
            bits = None
        index = _int(parts[0])
        if index is None:
            continue
        gpus.append(
            GpuState(
                index=index,
                name=parts[1],
                utilization_pct=_number(parts[2]),
                sm_clock_mhz=_number(parts[3]),
                sm_clock_max_mhz=_number(parts[4]),
                mem_clock_mhz=_number(parts[5]),
                mem_clock_max_mhz=_number(parts[6]),
                power_draw_w=_number(parts[7]),
                power_limit_w=_number(parts[8]),
                power_default_limit_w=_number(parts[9]),
                power_max_limit_w=_number(parts[10]),
                pcie_gen=_int(parts[11]),
                pcie_gen_max=_int(parts[12]),
                pcie_width=_int(parts[13]),
                pcie_width_max=_int(parts[14]),
                throttle_reasons=bits,
            )
        )
    return gpus


def parse_p2p(stdout: str) -> dict[tuple[int, int], str]:
    """``topo -p2p r``: (gpu, peer) -> status for every pair off the diagonal."""
    lines = [_ESCAPES.sub("", line) for line in stdout.splitlines()]
    header: list[int] = []
    matrix: dict[tuple[int, int], str] = {}
    for line in lines:
        cells = line.split()
        if not cells:
            if header:
                break  # the legend follows the matrix
            continue
        if not header and all(c.startswith("GPU") for c in cells):
            header = [int(c[3:]) for c in cells if c[3:].isdigit()]
            continue
        if header and cells[0].startswith("GPU") and cells[0][3:].isdigit():
            row = int(cells[0][3:])
            for peer, status in zip(header, cells[1:], strict=False):
                if peer != row:
                    matrix[(row, peer)] = status
    return matrix
