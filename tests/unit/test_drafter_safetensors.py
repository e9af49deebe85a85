"""safetensors headers read without torch, and the shard index."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from dflashops.drafter.safetensors import (
    fingerprint,
    header_bytes,
    read_header,
    read_weights,
)
from dflashops.errors import DrafterError


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_complete_file_with_data_reads(tmp_path: Path) -> None:
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        }
    ).encode()
    data = struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1, 2, 3, 4)
    tensors = read_header(write(tmp_path / "m.safetensors", data))
    assert list(tensors) == ["w"]
    assert (tensors["w"].dtype, tensors["w"].shape) == ("F32", (2, 2))


def test_header_only_file_reads_like_the_real_one(tmp_path: Path) -> None:
    big = {"fc.weight": ("BF16", (5120, 25600))}
    path = write(tmp_path / "model.safetensors", header_bytes(big))
    assert path.stat().st_size < 200
    assert read_header(path)["fc.weight"].shape == (5120, 25600)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"abc", "too short"),
        (struct.pack("<Q", 10**12) + b"{}", "does not fit"),
        (struct.pack("<Q", 4) + b"\xff\xfe{}", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not an object"),
        (struct.pack("<Q", 12) + b'{"w": "bad"}', "not an object"),
    ],
)
def test_broken_headers_are_one_line_errors(tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(DrafterError, match=message) as info:
        read_header(write(tmp_path / "m.safetensors", data))
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"dtype": 3, "shape": [1], "data_offsets": [0, 2]}, "dtype"),
        ({"dtype": "F16", "shape": [-1], "data_offsets": [0, 2]}, "shape"),
        ({"dtype": "F16", "shape": [True], "data_offsets": [0, 2]}, "shape"),
        ({"dtype": "F16", "shape": [1], "data_offsets": [4, 2]}, "data_offsets"),
        ({"dtype": "F16", "shape": [3], "data_offsets": [0, 2]}, "needs 6"),
    ],
)
def test_inconsistent_tensor_entries(tmp_path: Path, entry: object, message: str) -> None:
    raw = json.dumps({"w": entry}).encode()
    with pytest.raises(DrafterError, match=message):
        read_header(write(tmp_path / "m.safetensors", struct.pack("<Q", len(raw)) + raw))


def test_unknown_dtypes_are_read_without_a_size_check(tmp_path: Path) -> None:
    raw = json.dumps({"w": {"dtype": "F4", "shape": [8], "data_offsets": [0, 4]}}).encode()
    path = write(tmp_path / "m.safetensors", struct.pack("<Q", len(raw)) + raw)
    assert read_header(path)["w"].dtype == "F4"


def shard_dir(tmp_path: Path, weight_map: dict[str, str]) -> Path:
    write(tmp_path / "a.safetensors", header_bytes({"x": ("F16", (2,))}))
    write(tmp_path / "b.safetensors", header_bytes({"y": ("F16", (3,))}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return tmp_path


def test_shards_through_the_index(tmp_path: Path) -> None:
    weights = read_weights(shard_dir(tmp_path, {"x": "a.safetensors", "y": "b.safetensors"}))
    assert weights is not None
    assert weights.files == ("a.safetensors", "b.safetensors")
    assert weights.tensors["y"].file == "b.safetensors"


@pytest.mark.parametrize(
    ("weight_map", "message"),
    [
        ({"x": "a.safetensors", "y": "a.safetensors"}, "not in a.safetensors"),
        ({"x": "a.safetensors", "y": "c.safetensors"}, "does not exist"),
        ({"x": "../a.safetensors"}, "plain file name"),
        ({"x": 3}, "weight_map"),
    ],
)
def test_bad_indexes(tmp_path: Path, weight_map: dict[str, object], message: str) -> None:
    with pytest.raises(DrafterError, match=message):
        read_weights(shard_dir(tmp_path, weight_map))  # type: ignore[arg-type]


def test_a_tensor_in_two_shards_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "a.safetensors", header_bytes({"x": ("F16", (2,))}))
    write(tmp_path / "b.safetensors", header_bytes({"x": ("F16", (2,))}))
    with pytest.raises(DrafterError, match="also in"):
        read_weights(tmp_path)


def test_no_safetensors_means_none(tmp_path: Path) -> None:
    assert read_weights(tmp_path) is None


def test_fingerprint_is_over_names_dtypes_and_shapes_only(tmp_path: Path) -> None:
    one = read_header(write(tmp_path / "1.safetensors", header_bytes({"a": ("F16", (2, 3))})))
    two = read_header(write(tmp_path / "2.safetensors", header_bytes({"a": ("BF16", (2, 3))})))
    three = read_header(write(tmp_path / "3.safetensors", header_bytes({"a": ("F16", (3, 2))})))
    prints = {fingerprint(t.values()) for t in (one, two, three)}
    assert len(prints) == 3
    assert all(p.startswith("sha256:") and len(p) == 71 for p in prints)
