"""The wheel dflashops pushes into a container leaves the lab out (issue 31): the lab runs on the
operator's machine only, and a container must not carry its 7.7k lines, schema and corpora."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from dflashops.engine.wheel import CONTAINER_EXCLUDE, WHEEL_ENV, LocalWheel, local_wheel
from dflashops.launch.render import bundled_ref

REPO = Path(__file__).resolve().parents[2]
LAB_REF = "dflashops-lab/tiny-qwen3-dflash"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the checkout (other work may change the real one meanwhile)."""
    root = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("dflashops", "templates", "playbooks"):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    return root


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> LocalWheel:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(WHEEL_ENV, raising=False)
        return local_wheel(tmp_path_factory.mktemp("cache"), source)


def test_the_container_wheel_has_no_lab(wheel: LocalWheel) -> None:
    names = zipfile.ZipFile(wheel.path).namelist()
    assert [name for name in names if name.startswith("dflashops/lab/")] == []
    assert CONTAINER_EXCLUDE == ("dflashops/lab",)
    # what a container runs is all there: the bundled server, the validator, the training stages
    for needed in (
        "dflashops/server/entry.py",
        "dflashops/drafter/check.py",
        "dflashops/training/__main__.py",
        "dflashops/templates/launch.sh.j2",
        "dflashops/drafter/registry/z-lab--Qwen3.6-27B-DFlash.json",
    ):
        assert needed in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    # the lab offers its registry entry through an entry point: the wheel must not name it
    assert "dflashops.lab" not in zipfile.ZipFile(wheel.path).read(entry_points).decode()


def test_a_lab_edit_keeps_the_same_wheel(
    source: Path, wheel: LocalWheel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wheel's cache key and bytes ignore the lab, so editing it never reinstalls the wheel
    in every container (launch compares the container's copy by sha256)."""
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    changed = tmp_path / "src"
    shutil.copytree(source, changed)
    demo = changed / "dflashops" / "lab" / "demo.py"
    demo.write_text(demo.read_text() + "\n# edited\n")
    again = local_wheel(tmp_path / "cache", changed)
    assert again.sha256 == wheel.sha256
    assert again.path.parent.name == wheel.path.parent.name


def test_the_labs_ref_is_never_named_to_a_container() -> None:
    """A container's preflight gets only refs its own registry knows; the lab's entry is offered
    to the CLI, and its wheel has no lab."""
    assert bundled_ref(LAB_REF) is None
    assert bundled_ref("z-lab/Qwen3.6-27B-DFlash") == "z-lab/Qwen3.6-27B-DFlash"
