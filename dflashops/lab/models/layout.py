"""Where the lab models live and what a finished build looks like (standard library only).

The builders run inside the vLLM venv (they need torch); the CLI, the test fixtures and the lab
run in dflashops' own interpreter and only need these names and the manifest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflashops.cache import cache_root

# Bump when the builders change what they write, so a cached build is rebuilt.
FORMAT_VERSION = 2

TARGET = "tiny-qwen3"
DFLASH = "tiny-qwen3-dflash"
# the same weights with the config the incident's operator guessed (``lab demo`` replays it)
DFLASH_GUESSED = "tiny-qwen3-dflash-guessed"
# how the drafter was trained: job, dataset, the target's answers, loss log, provenance
DFLASH_TRAINING = "tiny-qwen3-dflash-training"
DRAFT_IDENTICAL = "tiny-qwen3-draft-identical"
DRAFT_DECAY = "tiny-qwen3-draft-decay"
PROMPTS = "prompts.jsonl"
ACCEPTANCE = "acceptance.json"
TARGET_TRAINING = "target-training.json"
MANIFEST = "manifest.json"
# everything a build writes (a rebuild removes these first)
BUILT = (
    TARGET,
    DFLASH,
    DFLASH_GUESSED,
    DFLASH_TRAINING,
    DRAFT_IDENTICAL,
    DRAFT_DECAY,
    PROMPTS,
    ACCEPTANCE,
    TARGET_TRAINING,
)
# the k the lab serves with: the decaying draft is calibrated and the DFlash drafter trained for it
NUM_SPECULATIVE_TOKENS = 4


def default_models_dir() -> Path:
    """Where ``dflashops lab models`` builds by default."""
    return cache_root() / "lab" / "models"


@dataclass(frozen=True)
class LabModels:
    """The paths of one build of the lab models."""

    root: Path

    @property
    def target(self) -> Path:
        return self.root / TARGET

    @property
    def dflash(self) -> Path:
        return self.root / DFLASH

    @property
    def dflash_guessed(self) -> Path:
        return self.root / DFLASH_GUESSED

    @property
    def dflash_training(self) -> Path:
        return self.root / DFLASH_TRAINING

    @property
    def draft_identical(self) -> Path:
        return self.root / DRAFT_IDENTICAL

    @property
    def draft_decay(self) -> Path:
        return self.root / DRAFT_DECAY

    @property
    def prompts(self) -> Path:
        return self.root / PROMPTS

    @property
    def acceptance(self) -> Path:
        return self.root / ACCEPTANCE

    @property
    def target_training(self) -> Path:
        return self.root / TARGET_TRAINING

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest a finished build wrote last, or None (absent or unreadable)."""
        try:
            data = json.loads(self.manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def is_complete(self, seed: int = 0) -> bool:
        """True when a build of this format and seed finished here and its files are intact."""
        manifest = self.read_manifest()
        if manifest is None:
            return False
        if manifest.get("format_version") != FORMAT_VERSION or manifest.get("seed") != seed:
            return False
        if manifest.get("corpus_sha256") != corpus_sha256():
            return False
        files = manifest.get("files")
        if not isinstance(files, dict) or not files:
            return False
        return all((self.root / name).is_file() for name in files)

    def read_prompts(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Prompt records from ``prompts.jsonl``, optionally only those of one ``kind``."""
        records = [
            json.loads(line)
            for line in self.prompts.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        return [r for r in records if kind is None or r.get("kind") == kind]


def corpus_dir() -> Path:
    return Path(__file__).with_name("corpus")


def corpus_files() -> list[Path]:
    """The corpus text files shipped with dflashops, in a fixed order."""
    return sorted(corpus_dir().glob("*.txt"))


def read_corpus() -> list[str]:
    """The corpus texts (one string per file), in the order of ``corpus_files``."""
    return [path.read_text(encoding="utf-8") for path in corpus_files()]


def corpus_sha256() -> str:
    digest = hashlib.sha256()
    for path in corpus_files():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(root: Path, *, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``root`` by relative POSIX path (sorted)."""
    return {
        path.relative_to(root).as_posix(): sha256_file(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() not in exclude
    }
