"""Each step's own inputs, for its digest: what the step reads that, changed, changes its result.

Most come from the inventory and the playbook. The drafter's files are read in the container
(:func:`drafter_fingerprint`): a config pushed or copied over since the last run is a change
the playbook does not show.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Any

from dflashops.errors import DflashopsError
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection
from dflashops.up.plan import short_digest

# the start of each weights file stands for its content: a drafter retrained or swapped differs
# there, and reading all of a multi-GB drafter on every run would not be "cheap to re-check"
WEIGHTS_PREFIX_BYTES = 16 * 1024 * 1024
REPORT_FORMAT = 1  # bump when the report step writes something new
SERVING_ONLY = {"bench", "tune", "train"}  # playbook sections launch does not read


@dataclass(frozen=True)
class DrafterFiles:
    """sha256 of the drafter's ``config.json`` and of its weights files' first bytes."""

    config_sha256: str | None
    weights: str | None
    note: str = ""  # why they could not be read


def tune_asked(playbook: Playbook) -> bool:
    """The playbook asks for ``tune`` when it has a ``tune`` section and speculates."""
    return "tune" in playbook.model_fields_set and playbook.drafter.method != "none"


def drafter_fingerprint(conn: SshConnection, container: str, playbook: Playbook) -> DrafterFiles:
    """Read the drafter's fingerprint over ``conn`` (nothing when the method has no files)."""
    model = playbook.drafter.model
    if model is None:
        return DrafterFiles(None, None, f"method {playbook.drafter.method} has no drafter files")
    folder = str(model.path)
    script = (
        f"cd -- {shlex.quote(folder)} && sha256sum config.json && "
        'for f in *.safetensors; do [ -f "$f" ] && '
        f'printf "%s " "$f" && head -c {WEIGHTS_PREFIX_BYTES} -- "$f" | sha256sum; done; true'
    )
    try:
        result = conn.run(script, ok_codes=None)
    except DflashopsError as exc:
        return DrafterFiles(None, None, f"{container} not reachable: {exc.one_line()}")
    if not result.ok:
        where = posixpath.join(folder, "config.json")
        return DrafterFiles(None, None, f"cannot read {where} in {container}")
    lines = result.stdout.strip().splitlines()
    config = lines[0].split()[0] if lines else None
    weights = "\n".join(lines[1:]) or None
    return DrafterFiles(config, weights)


def step_inputs(
    container: dict[str, Any], playbook: Playbook, drafter: DrafterFiles
) -> dict[str, dict[str, Any]]:
    """Each step's own inputs (JSON-able); the digests chain them (plan.chain_digests)."""
    book = playbook.model_dump(mode="json")
    serving = {key: value for key, value in book.items() if key not in SERVING_ONLY}
    return {
        "provision": {"container": container},
        "drafter": {
            "drafter": book["drafter"],
            "target": book["model"]["path"],
            "engine": book["engine"],
            "k": playbook.server.num_speculative_tokens,
            "drafter config": drafter.config_sha256,
            "drafter weights": drafter.weights,
        },
        "launch": {"playbook": serving},
        "smoke": {},
        "bench": {"bench": book["bench"]},
        "tune": {"tune": book["tune"] if tune_asked(playbook) else None},
        "report": {"format": REPORT_FORMAT},
    }


def tune_key(playbook: Playbook, drafter: DrafterFiles) -> str:
    """What a k* (or a load tune's schedule) is valid for: the drafter's files and the
    playbook but its k and schedule."""
    book = playbook.model_dump(mode="json")
    book["server"].pop("num_speculative_tokens", None)
    book["server"].pop("speculative_schedule", None)  # what tune --load writes
    book.pop("train", None)
    book.pop("container", None)
    return short_digest({"playbook": book, "config": drafter.config_sha256, "w": drafter.weights})
