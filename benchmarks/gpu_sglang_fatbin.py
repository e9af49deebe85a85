"""Zero the GPU code an H200 never loads from sgl-kernel's libraries, so xz shrinks the payload.

``python benchmarks/gpu_sglang_fatbin.py [--keep arch|h128bf16] LIB.so ...`` rewrites each
library in place (same size, same layout): every cubin in its ``.nv_fatbin`` section that the
rule does not keep has its bytes replaced by zeros; entry headers are untouched, so the CUDA
runtime still sees every entry and picks the sm_90 one on a compute-capability-9.0 device.

- ``arch`` keeps the sm_90 cubins and zeroes the others (sm_80, sm_86, sm_100, ...): a 9.0 device
  runs only sm_90 machine code, so the runtime never reads the rest.
- ``h128bf16`` also zeroes the sm_90 cubins whose FlashAttention-3 kernels are templated on
  another head dimension or element type than 128 / bf16 (a cubin holds one compilation unit,
  for example ``flash_fwd_hdim256_fp16_paged_split_sm90.cu``); cubins whose kernel names carry
  no such pair (the split-KV combine and varlen-prepare kernels) are kept. Qwen3-8B and its DFlash
  and EAGLE-3 drafters all have head_dim 128 in bf16. This relies on the runtime loading a
  module only when one of its kernels is first launched (lazy loading, the default since CUDA
  12.2; set ``CUDA_MODULE_LOADING=LAZY``): a zeroed cubin that is launched fails with "invalid
  device kernel image", and a model of another head dimension cannot use FA3 from this copy.

sgl-kernel 0.4.4's ``flash_ops.abi3.so``: 1,543 MiB of cubins, 946 MiB of them sm_90, of which
the head-dim-128 bf16 ones are about 60 MiB.
"""

from __future__ import annotations

import argparse
import re
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
ELF_MAGIC = b"\x7fELF"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # nvcc's --compress-mode: a zstd frame holding the cubin
KEEP_ARCH = 90
# the head dimension and element type a FA3 kernel is templated on: ...ELi128ENS_10bfloat16_tE...
PAIR = re.compile(r"ELi(\d+)ENS_(10bfloat16_t|6half_t|\d+float_e4m3_t|\d+float_e5m2_t)")


def sections(data: bytes | bytearray | memoryview) -> dict[str, tuple[int, int]]:
    """ELF64 section name -> (file offset, size)."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    names = bytes(data[str_off : str_off + str_size])
    out = {}
    for name_at, _, _, _, offset, size in headers:
        name = names[name_at : names.index(b"\0", name_at)].decode(errors="replace")
        out[name] = (offset, size)
    return out


def kernel_names(cubin: bytes | memoryview) -> list[str]:
    """The ``.text.<kernel>`` section names of one cubin (an ELF64 file)."""
    return [name[6:] for name in sections(cubin) if name.startswith(".text.")]


def keep_h128bf16(cubin: bytes | memoryview) -> bool:
    pairs = {m.groups() for name in kernel_names(cubin) for m in PAIR.finditer(name)}
    return not pairs or pairs == {("128", "10bfloat16_t")}


def entries(data: bytearray) -> list[tuple[int, int, int, str]]:
    """(payload offset, payload size, arch, "elf" | "zstd" | "other") for every fatbin entry."""
    offset, size = sections(data).get(".nv_fatbin", (0, 0))
    out, pos = [], offset
    while pos + 16 <= offset + size:
        magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned
            continue
        at, end = pos + header_size, pos + header_size + fat_size
        while at < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, at)
            arch = struct.unpack_from("<I", data, at + 28)[0]
            start = at + entry_header
            magic4 = bytes(data[start : start + 4])
            form = "other"
            if kind == 2 and magic4 in (ELF_MAGIC, ZSTD_MAGIC):
                form = "elf" if magic4 == ELF_MAGIC else "zstd"
            out.append((start, payload, arch, form))
            at = start + payload
        pos = end
    return out


def cubin(data: bytearray, start: int, size: int, form: str) -> bytes:
    """The cubin's ELF bytes (a compressed entry through the zstd command-line tool)."""
    raw = bytes(data[start : start + size])
    if form == "elf":
        return raw
    # the frame is followed by padding to the entry's 8-byte size: zstd reads one frame
    done = subprocess.run(["zstd", "-dc", "-q"], input=raw, capture_output=True, check=False)
    if not done.stdout.startswith(ELF_MAGIC):
        raise SystemExit(f"zstd could not unpack the cubin at {start}: {done.stderr[-200:]!r}")
    return done.stdout


def prune(path: Path, keep: str) -> Counter[str]:
    data = bytearray(path.read_bytes())
    tally: Counter[str] = Counter()
    for start, size, arch, form in entries(data):
        if form == "other":
            tally["kept (not a cubin)"] += size
            continue
        if arch == KEEP_ARCH and (keep == "arch" or keep_h128bf16(cubin(data, start, size, form))):
            tally[f"kept sm_{arch}"] += size
            continue
        tally[f"zeroed sm_{arch}"] += size
        data[start : start + size] = bytes(size)
    path.write_bytes(data)
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", choices=("arch", "h128bf16"), default="arch")
    ap.add_argument("libraries", nargs="+", type=Path)
    args = ap.parse_args()
    for lib in args.libraries:
        tally = prune(lib, args.keep)
        parts = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(tally.items()))
        print(f"{lib}: {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
