"""The bandwidth roofline: GPU table, safetensors headers, ceilings and the above-ceiling flag."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dflashops.drafter.safetensors import header_bytes
from dflashops.roofline.model import (
    GPUS,
    RooflineSpec,
    decode_ceiling,
    lookup_gpu,
    parse_count,
    parse_size,
    roofline,
    safetensors_weights,
)
from dflashops.tune import TuneInputError

GB = 10**9
A6000_TP2_27B = RooflineSpec(gpu="RTX A6000", tp=2, weight_bytes=54 * GB)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A real safetensors file: header JSON, then the (zeroed) tensor bytes back to back."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, itemsize) in tensors.items():
        size = itemsize
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_a6000_tp2_27b_bf16_ceiling() -> None:
    result = roofline(A6000_TP2_27B)
    assert result.bandwidth_gbps == 768
    assert result.ceiling_tok_s_at_al1 == pytest.approx(768 * 2 / 54)  # ≈ 28.4 tok/s
    assert 28 < result.ceiling_tok_s < 29
    assert "vendor spec" in result.bandwidth_source
    assert not result.above_ceiling and result.measured_tok_s is None


def test_acceptance_length_multiplies_the_ceiling_and_measurement_is_placed() -> None:
    result = roofline(A6000_TP2_27B, acceptance_length=3.0, measured_tok_s=61.3)
    assert result.ceiling_tok_s == pytest.approx(3 * 768 * 2 / 54)
    assert result.fraction_of_ceiling == pytest.approx(61.3 / result.ceiling_tok_s)
    assert not result.above_ceiling and result.warnings == ()
    # 61.3 tok/s at 3 tokens/step on 27 GB per GPU is ≈ 551 GB/s per GPU
    assert result.implied_bandwidth_gbps == pytest.approx(61.3 / 3 * 27)


def test_measurement_above_ceiling_times_al_is_flagged() -> None:
    ceiling = decode_ceiling(768, 2, 54 * GB, 2.5)
    result = roofline(A6000_TP2_27B, acceptance_length=2.5, measured_tok_s=ceiling * 1.1)
    assert result.above_ceiling
    assert "likely" in result.warnings[0] and "measurement error" in result.warnings[0]
    # the same number is plausible once the acceptance length is high enough
    assert not roofline(
        A6000_TP2_27B, acceptance_length=3.0, measured_tok_s=ceiling * 1.1
    ).above_ceiling


def test_bandwidth_override_wins_over_the_table() -> None:
    result = roofline(RooflineSpec(gpu="H200", bandwidth_gbps=4000, weight_bytes=16 * GB))
    assert result.bandwidth_gbps == 4000 and result.bandwidth_source == "given"
    assert result.ceiling_tok_s == pytest.approx(250)
    assert roofline(RooflineSpec(gpu="H200", weight_bytes=16 * GB)).ceiling_tok_s == 300


@pytest.mark.parametrize(
    ("name", "expected", "bandwidth"),
    [
        ("NVIDIA RTX A6000", "RTX A6000", 768),
        ("A6000", "RTX A6000", 768),
        ("NVIDIA GeForce RTX 3090", "RTX 3090", 936),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 1008),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1555),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB", 2039),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1935),
        ("NVIDIA L40S", "L40S", 864),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2000),
        ("NVIDIA H200", "H200", 4800),
        ("b200", "B200", 8000),
    ],
)
def test_gpu_lookup_takes_user_and_nvidia_smi_names(
    name: str, expected: str, bandwidth: float
) -> None:
    spec = lookup_gpu(name)
    assert (spec.name, spec.bandwidth_gbps) == (expected, bandwidth)


def test_ambiguous_and_unknown_gpus_are_refused() -> None:
    with pytest.raises(TuneInputError, match="ambiguous") as info:
        lookup_gpu("A100")
    assert info.value.field == "gpu"
    with pytest.raises(TuneInputError, match="ambiguous"):
        lookup_gpu("H100")
    with pytest.raises(TuneInputError, match="unknown GPU") as info:
        lookup_gpu("MI300X")
    assert "--bandwidth-gbps" in (info.value.hint or "")


def test_table_has_every_gpu_of_the_brief() -> None:
    names = {gpu.name for gpu in GPUS}
    assert {"RTX A6000", "RTX 3090", "RTX 4090", "A100 40GB", "A100 80GB", "L40S"} <= names
    assert {"H100 SXM", "H100 PCIe", "H200", "B200"} <= names


def test_moe_active_share_as_fraction_or_count() -> None:
    by_fraction = roofline(RooflineSpec(gpu="H200", weight_bytes=60 * GB, active_fraction=0.1))
    assert by_fraction.bytes_per_step == 6 * GB
    by_count = roofline(
        RooflineSpec(gpu="H200", weight_bytes=60 * GB, total_params=30 * GB, active_params=3 * GB)
    )
    assert by_count.active_fraction == pytest.approx(0.1)
    assert by_count.ceiling_tok_s == pytest.approx(800)
    extra = roofline(
        RooflineSpec(gpu="H200", weight_bytes=60 * GB, active_fraction=0.1, extra_bytes_per_step=GB)
    )
    assert extra.bytes_per_step == 7 * GB


def test_spec_validation() -> None:
    with pytest.raises(ValidationError, match="GPU or a bandwidth"):
        RooflineSpec(weight_bytes=GB)
    with pytest.raises(ValidationError, match="not both"):
        RooflineSpec(gpu="H200", weight_bytes=GB, active_fraction=0.5, active_params=1e8)
    with pytest.raises(ValidationError, match="total count"):
        RooflineSpec(gpu="H200", weight_bytes=GB, active_params=1e8)
    with pytest.raises(ValidationError):
        RooflineSpec(gpu="H200", weight_bytes=GB, tp=0)


def test_safetensors_header_bytes_and_params(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    write_safetensors(
        file,
        {
            "embed.weight": ("BF16", [1000, 64], 2),
            "norm.weight": ("F32", [64], 4),
            "q.weight": ("F8_E4M3", [64, 64], 1),
        },
    )
    for target in (file, tmp_path):
        info = safetensors_weights(target)
        assert info.bytes == 128_000 + 256 + 4096
        assert info.params == 64_000 + 64 + 4096
        assert info.bytes_by_dtype == {"BF16": 128_000, "F32": 256, "F8_E4M3": 4096}
        assert info.files == ("model.safetensors",)


def test_header_only_checkpoint_reads_like_the_real_one(tmp_path: Path) -> None:
    # how a 54 GB target is stood in for: the header alone, no tensor data
    (tmp_path / "model.safetensors").write_bytes(header_bytes({"w": ("BF16", (27_000, 1_000_000))}))
    info = safetensors_weights(tmp_path)
    assert info.bytes == 54 * GB and info.params == 27 * GB
    spec = RooflineSpec(gpu="RTX A6000", tp=2, weight_bytes=info.bytes)
    assert roofline(spec).ceiling_tok_s == pytest.approx(768 * 2 / 54)


def test_sharded_checkpoint_counts_only_indexed_shards(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": ("BF16", [100], 2)})
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"b": ("BF16", [50], 2)})
    write_safetensors(tmp_path / "consolidated.safetensors", {"c": ("BF16", [150], 2)})
    index = {
        "metadata": {"total_size": 300},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    info = safetensors_weights(tmp_path)
    assert info.bytes == 300 and info.params == 150
    assert info.files == ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    (tmp_path / "model.safetensors.index.json").unlink()
    assert safetensors_weights(tmp_path).bytes == 600  # no index: every file counts


def test_bad_safetensors_files_are_input_errors(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(struct.pack("<Q", 4) + b"nope")
    no_offsets = tmp_path / "no-offsets.safetensors"
    raw = json.dumps({"w": {"dtype": "BF16", "shape": [2]}}).encode()
    no_offsets.write_bytes(struct.pack("<Q", len(raw)) + raw)
    for bad in (short, huge, garbage, no_offsets):
        with pytest.raises(TuneInputError) as info:
            safetensors_weights(bad)
        assert info.value.field == "weights"
        assert bad.name in info.value.message
    exotic = tmp_path / "exotic.safetensors"
    raw = json.dumps({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}).encode()
    exotic.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0")
    with pytest.raises(TuneInputError, match="size is unknown") as info:
        safetensors_weights(exotic)
    assert "54GB" in (info.value.hint or "")
    with pytest.raises(TuneInputError, match="no such file"):
        safetensors_weights(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TuneInputError, match=r"no \.safetensors files"):
        safetensors_weights(empty)


@pytest.mark.parametrize(
    ("text", "size"),
    [("54GB", 54 * GB), ("54 gb", 54 * GB), ("5.4e10", 54 * GB), ("1GiB", 2**30), ("512", 512)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_parse_size_and_count_errors() -> None:
    with pytest.raises(TuneInputError, match="unknown size unit"):
        parse_size("3 parsecs", field="weights")
    with pytest.raises(TuneInputError, match="not a size") as info:
        parse_size("big", field="weights")
    assert info.value.field == "weights"
    assert parse_count("3B") == 3e9
    assert parse_count("800M") == 8e8
    assert parse_count("0.1") == 0.1
