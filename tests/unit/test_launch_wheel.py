"""dflashops' own wheel for the engine venvs: built from the source once per source state,
reproducible, shipping the templates and the bundled server."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from dflashops import __version__
from dflashops.engine.wheel import WHEEL_ENV, WheelError, local_wheel, source_root

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the checkout (other work may change the real one meanwhile)."""
    root = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "dflashops", root / "dflashops", ignore=ignore)
    for folder in ("templates", "playbooks"):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    return root


def test_built_once_reproducibly_with_templates(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    first = local_wheel(tmp_path / "a", source)
    again = local_wheel(tmp_path / "a", source)
    other = local_wheel(tmp_path / "b", source)
    assert again.path == first.path  # cached
    assert other.sha256 == first.sha256  # same source, same bytes
    assert first.version == __version__
    names = zipfile.ZipFile(first.path).namelist()
    assert "dflashops/templates/launch.sh.j2" in names
    assert "dflashops/server/entry.py" in names
    assert not [n for n in names if "__pycache__" in n]


def test_a_source_change_makes_a_new_wheel(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(WHEEL_ENV, raising=False)
    changed = tmp_path / "src"
    shutil.copytree(source, changed)
    before = local_wheel(tmp_path / "c", changed)
    (changed / "dflashops" / "deployment" / "layout.py").write_text(
        (changed / "dflashops" / "deployment" / "layout.py").read_text() + "\n# edited\n"
    )
    after = local_wheel(tmp_path / "c", changed)
    assert after.sha256 != before.sha256 and after.path.parent != before.path.parent


def test_explicit_wheel_and_no_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "dflashops-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    monkeypatch.setenv(WHEEL_ENV, str(wheel))
    assert local_wheel().path == wheel
    monkeypatch.delenv(WHEEL_ENV)
    installed = tmp_path / "site-packages" / "dflashops"
    installed.mkdir(parents=True)
    assert source_root(installed) is None
    monkeypatch.setattr("dflashops.engine.wheel.source_root", lambda: None)
    with pytest.raises(WheelError, match="not a source checkout"):
        local_wheel(tmp_path / "cache")
