"""The wheel dflashops pushes into a container leaves the lab out (issue 31): the lab runs on the
operator's machine only, and a container must not carry its 7.7k lines, schema and corpora."""

from __future__ import annotations

import shutil
import subprocess
import sys
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


# a container never runs the CLI's lab commands; `lab demo`'s view imports the lab's report
CLI_OF_THE_LAB = "dflashops/cli/lab"
IMPORT_ALL = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import dflashops
print(dflashops.__file__)
print(sorted(name for name in sys.modules if name.startswith("dflashops.lab")))
"""


def test_what_a_container_runs_needs_no_lab(wheel: LocalWheel, tmp_path: Path) -> None:
    """Every module of the wheel imports from the wheel alone (the bundled server, the training
    stages, the validator…), and ``python -m`` of the server and the training stages starts."""
    names = zipfile.ZipFile(wheel.path).namelist()
    zipfile.ZipFile(wheel.path).extractall(tmp_path / "wheel")
    modules = sorted(
        ".".join(Path(name).with_suffix("").parts).removesuffix(".__init__")
        for name in names
        if name.endswith(".py")
        and not name.startswith(CLI_OF_THE_LAB)
        and not name.endswith("__main__.py")  # runs the CLI
    )
    env = {"PYTHONPATH": str(tmp_path / "wheel"), "PATH": "/usr/bin:/bin"}

    def python(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, *args]
        return subprocess.run(
            argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )

    done = python("-c", IMPORT_ALL, *modules)
    assert done.returncode == 0, done.stderr
    where, lab_modules = done.stdout.splitlines()
    assert Path(where).is_relative_to(tmp_path / "wheel")
    assert lab_modules == "[]"
    for main in ("dflashops.server", "dflashops.training"):
        started = python("-m", main, "--help")
        assert started.returncode == 0, started.stderr


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
