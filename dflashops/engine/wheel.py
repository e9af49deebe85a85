"""dflashops' own wheel, built once per source state and cached, for the engine venvs.

The cache key is the version plus a digest of the files the wheel packs (the package, the
``templates/`` and ``playbooks/`` and ``pyproject.toml``), not the version alone: during
development the code changes while the version stays, and a container must never run other code
than the CLI that launched it.
This wheel is not the one ``pip install .`` makes: it leaves out what never runs in a container
(``CONTAINER_EXCLUDE``: the lab, 7.7k lines and 580 KB of schema and corpora), and entry points
into it. Builds use hatchling's API (the build backend) with that exclusion added to the
project's own configuration and a fixed ``SOURCE_DATE_EPOCH``, so the same source gives the same
wheel bytes. ``DFLASHOPS_WHEEL`` names a prebuilt wheel instead (an installed CLI without a
checkout).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflashops import __version__
from dflashops.cache import cache_root
from dflashops.errors import DflashopsError

WHEEL_ENV = "DFLASHOPS_WHEEL"
SOURCE_DATE_EPOCH = "1767225600"  # 2026-01-01: wheels are reproducible, not dated
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")
#: folders (relative to the checkout) the container wheel leaves out
CONTAINER_EXCLUDE = ("dflashops/lab",)


class WheelError(DflashopsError):
    """dflashops' own wheel could not be built or found."""


@dataclass(frozen=True)
class LocalWheel:
    path: Path
    sha256: str
    version: str

    @property
    def filename(self) -> str:
        return self.path.name


def source_root(package_dir: Path | None = None) -> Path | None:
    """The checkout holding this package (a ``pyproject.toml`` naming dflashops), or None."""
    package = package_dir or Path(__file__).resolve().parent.parent
    root = package.parent
    pyproject = root / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    return root if 'name = "dflashops"' in text else None


def _source_files(root: Path) -> Iterator[Path]:
    excluded = {root / folder for folder in CONTAINER_EXCLUDE}
    for top in (root / "dflashops", root / "templates", root / "playbooks"):
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(
                d for d in dirnames if d not in _SKIP_DIRS and Path(dirpath, d) not in excluded
            )
            for name in sorted(filenames):
                if not name.endswith(_SKIP_SUFFIXES):
                    yield Path(dirpath) / name
    yield root / "pyproject.toml"


def source_digest(root: Path) -> str:
    """sha256 over every file the container wheel packs: its relative path and content."""
    digest = hashlib.sha256()
    for path in _source_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def wheel_cache_dir() -> Path:
    return cache_root() / "wheels"


def local_wheel(cache_dir: Path | None = None, root: Path | None = None) -> LocalWheel:
    """The wheel of the running dflashops: ``DFLASHOPS_WHEEL``, else cached, else built now."""
    explicit = os.environ.get(WHEEL_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise WheelError(f"{WHEEL_ENV}={explicit}: no such file")
        return LocalWheel(path, file_sha256(path), __version__)
    root = root or source_root()
    if root is None:
        raise WheelError(
            "cannot build dflashops' wheel: this dflashops is not a source checkout",
            hint=f"set {WHEEL_ENV} to the dflashops-{__version__} wheel this CLI came from",
        )
    folder = (cache_dir or wheel_cache_dir()) / f"{__version__}-{source_digest(root)[:16]}"
    found = _cached(folder)
    if found is not None:
        return found
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _cached(folder)
        if found is None:
            _build_into(root, folder)
            found = _cached(folder)
    if found is None:
        raise WheelError(f"building the wheel left nothing in {folder}")
    _prune(folder)
    return found


def _prune(keep: Path, kept: int = 5) -> None:
    """Drop all but the newest ``kept`` builds (every edit of the source makes a new one)."""
    builds = sorted(
        (p for p in keep.parent.glob(f"{__version__}-*") if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
    )
    for old in builds[: max(0, len(builds) - (kept - 1))]:
        shutil.rmtree(old, ignore_errors=True)


def _cached(folder: Path) -> LocalWheel | None:
    wheels = sorted(folder.glob(f"dflashops-{__version__}-*.whl")) if folder.is_dir() else []
    if not wheels:
        return None
    return LocalWheel(wheels[0], file_sha256(wheels[0]), __version__)


def _build_into(root: Path, folder: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=folder.parent))
    try:
        _build(root, staging)
        built = list(staging.glob("*.whl"))
        if len(built) != 1:
            raise WheelError(f"the wheel build produced {len(built)} wheels in {staging}")
        staging.chmod(0o755)
        staging.rename(folder)  # atomic: a folder is either complete or absent
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def container_config(root: Path) -> dict[str, Any]:
    """The checkout's ``pyproject.toml`` as hatchling reads it, with the wheel target told to
    leave ``CONTAINER_EXCLUDE`` out, and without entry points into what it leaves out."""
    try:
        config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WheelError(f"{root / 'pyproject.toml'}: {exc}") from exc
    build = config.setdefault("tool", {}).setdefault("hatch", {}).setdefault("build", {})
    wheel = build.setdefault("targets", {}).setdefault("wheel", {})
    wheel["exclude"] = [*wheel.get("exclude", []), *CONTAINER_EXCLUDE]
    groups = config.get("project", {}).get("entry-points", {})
    for name, points in list(groups.items()):
        kept = {key: value for key, value in points.items() if not _left_out(value)}
        if kept:
            groups[name] = kept
        else:
            del groups[name]
    return config


def _left_out(target: str) -> bool:
    """Whether an entry point's ``module[:attr]`` lies in a folder the container wheel omits."""
    module = target.partition(":")[0].strip()
    for folder in CONTAINER_EXCLUDE:
        package = folder.replace("/", ".")
        if module == package or module.startswith(package + "."):
            return True
    return False


def _build(root: Path, out: Path) -> None:
    try:
        from hatchling.builders.wheel import WheelBuilder
    except ImportError as exc:  # a dependency of dflashops: only a --no-deps install lacks it
        raise WheelError(
            "cannot build dflashops' wheel: hatchling is not installed",
            hint="pip install hatchling",
        ) from exc
    builder = WheelBuilder(str(root), config=container_config(root))
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = SOURCE_DATE_EPOCH
    try:
        list(builder.build(directory=str(out), versions=["standard"]))
    except Exception as exc:  # a packaging bug must name itself, not crash the CLI
        raise WheelError(f"hatchling could not build the wheel: {exc}") from exc
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous
