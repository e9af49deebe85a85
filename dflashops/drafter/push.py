"""``drafter push``: write the reference's certain values into a container's drafter config.

Facts (the container's config, the deployed manifest) → plan (:func:`corrected_config`: only keys
the reference is certain of; nothing it does not know is removed or replaced) → apply (the atomic,
checksummed put with a timestamped backup), then re-read and re-check. A running server read its
config at start, so any change means it still runs the old one: the result says so.

A feature on top of the deployment contract, unlike the rest of :mod:`dflashops.drafter` (the
validation, standard library only, which the bundled server imports): nothing in the package
imports this module.
"""

from __future__ import annotations

import json
import posixpath
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.deployment.access import connect
from dflashops.deployment.lock import container_lock
from dflashops.deployment.manifest import read_manifest
from dflashops.drafter.correct import Change, corrected_config
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.fetch import fetch_model_meta
from dflashops.drafter.files import read_drafter, read_target
from dflashops.drafter.formats import SPECULATORS, ZLAB_ONLY, checked_view, config_format
from dflashops.drafter.keys import get_path, json_equal
from dflashops.drafter.registry import Registry, RegistryEntry, load_registry
from dflashops.drafter.validate import validate_drafter
from dflashops.errors import DrafterError
from dflashops.inventory.load import Inventory
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.remote import SshConnection, get_text, put_atomic

CONFIG = "config.json"


@dataclass
class PushResult:
    """What ``drafter push`` found and did."""

    container: str
    path: str
    reference: str
    changes: list[Change]
    dry_run: bool
    pushed: bool = False
    backup: str | None = None
    sha256: str | None = None
    relaunch_needed: bool = False
    server_note: str = ""
    findings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "path": self.path,
            "reference": self.reference,
            "changes": [
                {"key": c.key, "old": c.old, "new": c.new, "existed": c.existed}
                for c in self.changes
            ],
            "dry_run": self.dry_run,
            "pushed": self.pushed,
            "backup": self.backup,
            "sha256": self.sha256,
            "relaunch_needed": self.relaunch_needed,
            "server": self.server_note,
            "findings": self.findings,
        }


def drafter_dir(playbook: Playbook) -> str:
    """The drafter directory inside the container, from the playbook."""
    if playbook.drafter.model is None:
        raise DrafterError(
            f"playbook {playbook.name}: method {playbook.drafter.method} has no drafter"
        )
    return str(playbook.drafter.model.path)


def reference_for(
    registry: Registry, source: str | None, playbook: Playbook, fetched: Path
) -> RegistryEntry:
    """``--from`` (a registry name or entry file), else the playbook's ``drafter.ref``, else the
    entry the drafter's files match (name, path or weights fingerprint)."""
    if source:
        return registry.resolve(source)
    if playbook.drafter.ref:
        return registry.resolve(playbook.drafter.ref)
    match = registry.match(read_drafter(str(fetched)))
    if match is None:
        raise DrafterError(
            "no reference for this drafter",
            hint="give --from NAME (see `dflashops drafter refs`) or set drafter.ref",
        )
    return match.entry


def push_drafter_config(
    inventory: Inventory,
    container: str,
    playbook: Playbook,
    *,
    source: str | None = None,
    dry_run: bool = False,
    progress: Say | None = None,
    connection: SshConnection | None = None,
    registry_paths: tuple[Path, ...] = (),
    wait_s: float | None = None,
) -> PushResult:
    """Patch the container's drafter ``config.json`` with the reference's certain values."""
    say = progress or quiet
    remote_dir = drafter_dir(playbook)
    remote_config = posixpath.join(remote_dir, CONFIG)
    registry = load_registry(registry_paths)
    with ExitStack() as stack:
        # a connection we open is ours to close; a given one stays open for its owner
        conn = connection or stack.enter_context(connect(inventory, container))
        if not dry_run:  # one writer per container (held already when the caller holds it)
            stack.enter_context(container_lock(conn, container, "drafter push", wait_s=wait_s))
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="dflashops-push-"))
        say(f"reading {remote_dir}")
        fetched = Path(tmp) / "drafter"
        fetch_model_meta(conn, remote_dir, fetched, weights=True)
        current = json.loads((fetched / CONFIG).read_text(encoding="utf-8"))
        if not isinstance(current, dict):
            raise DrafterError(f"{remote_config}: not a JSON object")
        entry = reference_for(registry, source, playbook, fetched)
        new, changes = corrected_config(current, entry)
        result = PushResult(container, remote_config, entry.name, changes, dry_run)
        if dry_run or not changes:
            result.server_note = "nothing to push" if not changes else "dry run: nothing written"
            return result
        say(f"pushing {len(changes)} corrected key(s) to {remote_config}")
        data = (json.dumps(new, indent=2) + "\n").encode()
        put = put_atomic(conn, data, remote_config, mode=0o644)
        result.pushed, result.backup, result.sha256 = put.changed, put.backup, put.sha256
        _verify(get_text(conn, remote_config), entry, remote_config)
        (fetched / CONFIG).write_bytes(data)
        result.findings = _recheck(conn, fetched, playbook, entry, Path(tmp) / "target")
        result.relaunch_needed, result.server_note = _server_note(conn, remote_dir)
    return result


def _verify(text: str, entry: RegistryEntry, where: str) -> None:
    """Re-read after the put: every certain key must now hold the reference's value."""
    raw = json.loads(text)
    config = checked_view(raw)  # where the engine reads each key, whichever layout the file has
    skipped = ZLAB_ONLY if config_format(raw) == SPECULATORS else frozenset()
    for rv in entry.keys:
        if rv.path in skipped:
            continue
        if rv.certain and not any(json_equal(get_path(config, p), rv.value) for p in rv.read_from):
            raise DrafterError(f"{where}: {rv.path} does not hold the reference value after push")


def _recheck(
    conn: SshConnection, fetched: Path, playbook: Playbook, entry: RegistryEntry, target_dir: Path
) -> list[str]:
    """Validate the pushed config against the target (when readable) and the reference."""
    target = None
    try:
        fetch_model_meta(conn, str(playbook.model.path), target_dir, weights=False)
        target = read_target(str(target_dir))
    except DrafterError:
        target = None
    engine = parse_engine(f"{playbook.engine.name}=={playbook.engine.version}")
    run = validate_drafter(
        read_drafter(str(fetched)),
        target,
        entry,
        engine=engine,
        k=playbook.server.num_speculative_tokens,
    )
    return [f"{f.severity}: {f.key}: expected {f.expected}, found {f.found}" for f in run.findings]


def _server_note(conn: SshConnection, remote_dir: str) -> tuple[bool, str]:
    """Whether a running server was started with the drafter just changed (it read the old one)."""
    manifest = read_manifest(conn)
    if manifest is None or manifest.pid is None:
        return False, "no server deployed: the next launch uses the corrected config"
    drafter = str(manifest.spec.get("drafter") or "")
    if drafter.rstrip("/") != remote_dir.rstrip("/"):
        return False, f"the deployed server uses another drafter ({drafter or 'none'})"
    return True, (
        f"the server at {manifest.endpoint} was started with the old config: "
        f"relaunch it (`dflashops launch {manifest.container}`)"
    )
