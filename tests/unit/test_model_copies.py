"""A placement's members must load the same model (issue 24): the checksum script run for real in
``bash`` over folders here (as it runs on each member over SSH), its cache, and the comparison
that ``launch`` refuses on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dflashops.deployment.layout import Layout
from dflashops.launch.model_copies import compare_copies, parse_sums, sums_folder, sums_script


def model(folder: Path, weights: bytes = b"w" * 1000) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "sub" / "tokenizer.json").write_text("{}")
    return folder


def sums_of(path: Path, layout: Layout, *, keep: bool = True) -> dict[str, str]:
    script = sums_script(str(path), layout, keep=keep)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return parse_sums(done.stdout)


def test_the_same_files_give_the_same_sums_and_a_copy_matches(tmp_path: Path) -> None:
    layout = Layout(state=str(tmp_path / "state"))
    head = sums_of(model(tmp_path / "a"), layout)
    assert sorted(head) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    copy = sums_of(model(tmp_path / "b"), layout)
    assert compare_copies("/models/t", "head", {"head": head, "w": copy}) == []


def test_the_cache_is_used_until_the_listing_changes(tmp_path: Path) -> None:
    layout = Layout(state=str(tmp_path / "state"))
    folder = model(tmp_path / "a")
    first = sums_of(folder, layout)
    (cached,) = Path(sums_folder(layout)).iterdir()
    # the cache answers while names, sizes and times stay (the bytes are not read again)
    cached.write_text(cached.read_text().replace(first["config.json"], "0" * 64))
    assert sums_of(folder, layout)["config.json"] == "0" * 64
    # a file that changes size is read again
    (folder / "model.safetensors").write_bytes(b"v" * 1001)
    again = sums_of(folder, layout)
    assert again["config.json"] == first["config.json"]
    assert again["model.safetensors"] != first["model.safetensors"]


def test_differences_are_named(tmp_path: Path) -> None:
    layout = Layout(state=str(tmp_path / "state"))
    head = sums_of(model(tmp_path / "a"), layout)
    other = model(tmp_path / "b", weights=b"x" * 1000)  # same size, other bytes: a re-quant
    (other / "sub" / "tokenizer.json").unlink()
    (other / "extra.bin").write_bytes(b"1")
    os.utime(other / "model.safetensors", (1, 1))
    (mismatch,) = compare_copies(
        "/models/t", "lab-ct1", {"lab-ct1": head, "lab-ct2": sums_of(other, layout)}
    )
    assert mismatch.line("lab-ct1") == (
        "/models/t on lab-ct2 is not lab-ct1's copy (missing on lab-ct2: sub/tokenizer.json; "
        "only on lab-ct2: extra.bin; different content: model.safetensors)"
    )


def test_a_hostile_path_stays_one_argument(tmp_path: Path) -> None:
    layout = Layout(state=str(tmp_path / "state"))
    folder = model(tmp_path / "a b; touch pwned")
    assert "config.json" in sums_of(folder, layout)
    assert not (Path.cwd() / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_a_dry_run_reads_the_cache_but_writes_nothing(tmp_path: Path) -> None:
    layout = Layout(state=str(tmp_path / "state"))
    folder = model(tmp_path / "a")
    dry = sums_of(folder, layout, keep=False)
    assert not Path(sums_folder(layout)).exists()
    assert sums_of(folder, layout) == dry  # the real launch computes and keeps the same sums
    (cached,) = Path(sums_folder(layout)).iterdir()
    cached.write_text(cached.read_text().replace(dry["config.json"], "0" * 64))
    assert sums_of(folder, layout, keep=False)["config.json"] == "0" * 64
