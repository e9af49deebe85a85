"""safetensors headers without torch: tensor names, dtypes and shapes, and a fingerprint.

A ``.safetensors`` file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON
(``{"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}``), then the raw data.
Only the header is ever read. The reader checks the header against itself (each tensor's byte span
equals its element count times its dtype size) but never that the data bytes are present, so a
header-only file (how the test fixtures stand in for a multi-GB checkpoint) reads like the real
one. Sharded checkpoints are found through ``model.safetensors.index.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflashops.drafter.keys import is_int, type_name
from dflashops.errors import DrafterError, read_capped

# The format caps the header at 100 MB; a larger length means the file is not safetensors.
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

DTYPE_BYTES: Mapping[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header declares it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str


@dataclass(frozen=True)
class WeightsInfo:
    """Every tensor of a checkpoint (all shards), and the files they came from."""

    tensors: Mapping[str, TensorInfo]
    files: tuple[str, ...]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.tensors.values())


def fingerprint(tensors: Any) -> str:
    """``sha256:`` over the sorted ``name<TAB>dtype<TAB>d0,d1,…<LF>`` lines of every tensor.

    Shard layout, offsets and metadata do not count: the same weights split differently (or saved
    header-only) give the same fingerprint."""
    lines = sorted(f"{t.name}\t{t.dtype}\t{','.join(map(str, t.shape))}\n" for t in tensors)
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def read_header(path: Path) -> dict[str, TensorInfo]:
    """The tensors declared by one ``.safetensors`` file (header only)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise DrafterError(f"{path}: too short to be safetensors ({size} bytes)")
            length = int.from_bytes(prefix, "little")
            if length < 2 or length > MAX_HEADER_BYTES or length > size - 8:
                raise DrafterError(
                    f"{path}: header length {length} does not fit a {size}-byte safetensors file"
                )
            raw = fh.read(length)
    except OSError as exc:
        raise DrafterError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DrafterError(f"{path}: safetensors header is not JSON: {_short(exc)}") from exc
    if not isinstance(header, dict):
        raise DrafterError(f"{path}: safetensors header is {type_name(header)}, not an object")
    return {
        name: _tensor(path, name, entry) for name, entry in header.items() if name != "__metadata__"
    }


def _tensor(path: Path, name: str, entry: Any) -> TensorInfo:
    def bad(why: str) -> DrafterError:
        return DrafterError(f"{path}: tensor {name[:80]!r}: {why}")

    if not isinstance(entry, dict):
        raise bad(f"entry is {type_name(entry)}, not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise bad("dtype is not a string")
    if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
        raise bad("shape is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(is_int(o) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise bad("data_offsets is not [start, end] with 0 <= start <= end")
    width = DTYPE_BYTES.get(dtype)
    if width is not None and offsets[1] - offsets[0] != math.prod(shape) * width:
        raise bad(
            f"data_offsets span {offsets[1] - offsets[0]} bytes, "
            f"but {dtype}{shape} needs {math.prod(shape) * width}"
        )
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), file=path.name)


def read_weights(directory: Path) -> WeightsInfo | None:
    """Every tensor of the checkpoint in ``directory``; ``None`` when it has no safetensors.

    Order: the shard index if present, else ``model.safetensors``, else every ``*.safetensors``."""
    index = directory / INDEX_FILE
    weight_map: dict[str, str] | None = None
    if index.is_file():
        weight_map = _weight_map(index)
        files = sorted(set(weight_map.values()))
    elif (directory / SINGLE_FILE).is_file():
        files = [SINGLE_FILE]
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors") if p.is_file())
    if not files:
        return None
    tensors: dict[str, TensorInfo] = {}
    for file in files:
        shard = directory / file
        if not shard.is_file():
            raise DrafterError(f"{index}: names shard {file!r}, which does not exist")
        for name, tensor in read_header(shard).items():
            if name in tensors:
                raise DrafterError(
                    f"{shard}: tensor {name[:80]!r} is also in {tensors[name].file}",
                    hint="a tensor must live in exactly one shard",
                )
            tensors[name] = tensor
    for name, file in (weight_map or {}).items():
        listed = tensors.get(name)
        if listed is None or listed.file != file:
            raise DrafterError(f"{index}: tensor {name[:80]!r} is not in {file}")
    return WeightsInfo(tensors=tensors, files=tuple(files))


def _weight_map(index: Path) -> dict[str, str]:
    weight_map = _read_index(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise DrafterError(f"{index}: weight_map is not an object of tensor -> shard file")
    for shard in set(weight_map.values()):
        # the index is data from elsewhere: a shard name must stay inside the directory
        # (and fit a file name: past 255 bytes, asking whether it exists raises ENAMETOOLONG)
        plain = (
            shard and Path(shard).name == shard and shard not in {".", ".."} and "\0" not in shard
        )
        if not plain or len(shard.encode("utf-8", "surrogatepass")) > 255:
            raise DrafterError(f"{index}: shard name {shard[:80]!r} is not a plain file name")
    return weight_map


MAX_INDEX_BYTES = 64 * 1024 * 1024  # one name per tensor: a few MB for the largest models


def _read_index(index: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_capped(index, MAX_INDEX_BYTES).decode("utf-8"))
    except OSError as exc:
        raise DrafterError(f"{index}: cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DrafterError(f"{index}: not JSON: {_short(exc)}") from exc
    if not isinstance(data, dict):
        raise DrafterError(f"{index}: is {type_name(data)}, not an object")
    return data


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def header_bytes(tensors: Mapping[str, tuple[str, tuple[int, ...]]]) -> bytes:
    """A header-only safetensors file declaring ``tensors`` (name -> (dtype, shape)).

    Offsets are laid out as if the data followed; the data itself is not written. Used to build
    fixtures and test inputs that stand in for large checkpoints."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        end = offset + math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    return len(raw).to_bytes(8, "little") + raw
