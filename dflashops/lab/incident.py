"""The incident ``lab demo`` replays: a trained DFlash drafter shipped with a guessed config.

The deployment dflashops grew from served a drafter whose ``config.json`` had been written by
hand: every layer ``full_attention`` instead of the sliding layout it was trained with, the wrong
``target_layer_ids`` and the wrong mask token. Acceptance fell to about nothing and nothing
warned. The lab build keeps a copy of its trained drafter with exactly those three guesses
(``tiny-qwen3-dflash-guessed``, same weights). The demo copies it into the container where an
operator would have put it (a writable folder: ``drafter push`` must be able to correct it) and
points a copy of the lab playbook at it (with a smaller tune budget); each demo run stages it
afresh, so the replay starts from the incident every time. The folder is the demo's own:
nothing else writes there.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path

from dflashops.deployment.access import connect
from dflashops.errors import tail_lines
from dflashops.inventory.load import Inventory
from dflashops.lab.daemon import CT_MODELS_DIR
from dflashops.lab.errors import LabError

GUESSED = "tiny-qwen3-dflash-guessed"
TRAINED_PATH = posixpath.join(CT_MODELS_DIR, "tiny-qwen3-dflash")
# where the operator copied the drafter: writable, unlike the lab's read-only model mount
STAGED_PATH = "/srv/lab-demo/tiny-qwen3-dflash"
STAGED_PARENT = posixpath.dirname(STAGED_PATH)
TUNE_BUDGET = 3  # launches the demo's live tune may spend (the bundled playbook says 4)


def stage_guessed_drafter(inventory: Inventory, container: str) -> str:
    """Copy the guessed-config drafter to ``STAGED_PATH`` in ``container`` (replacing it)."""
    source = posixpath.join(CT_MODELS_DIR, GUESSED)
    staging = f"{STAGED_PATH}.staging"
    script = " && ".join(
        [
            f"test -f {shlex.quote(posixpath.join(source, 'config.json'))}",
            f"mkdir -p {shlex.quote(STAGED_PARENT)}",
            f"rm -rf {shlex.quote(staging)}",
            f"cp -r {shlex.quote(source)} {shlex.quote(staging)}",
            f"rm -rf {shlex.quote(STAGED_PATH)}",
            f"mv {shlex.quote(staging)} {shlex.quote(STAGED_PATH)}",
        ]
    )
    with connect(inventory, container) as conn:
        result = conn.run(script, ok_codes=None)
    if not result.ok:
        raise LabError(
            f"cannot stage the guessed drafter in {container}: "
            + tail_lines(result.stderr or result.stdout, 3),
            hint="rebuild the lab models (`dflashops lab models --force`) and run `lab up` again",
        )
    return STAGED_PATH


def incident_playbook(bundled: Path, out: Path) -> Path:
    """Write ``out``: the bundled lab playbook with its drafter path on the staged copy."""
    text = bundled.read_text(encoding="utf-8")
    line = f"path: {TRAINED_PATH}\n"
    if text.count(line) != 1:
        raise LabError(f"{bundled}: expected one `{line.strip()}` line (the drafter's path)")
    budget = f"  budget: {TUNE_BUDGET}\n"
    if text.count("\n  budget: ") != 1:
        raise LabError(f"{bundled}: expected one `budget:` line (tune's launches)")
    text = re.sub(r"\n  budget: \d+\n", "\n" + budget, text)
    header = (
        "# lab demo: the lab playbook pointed at a copy of the trained drafter whose config was\n"
        f"# guessed by hand (the incident); `drafter push` corrects {STAGED_PATH}/config.json.\n"
        f"# tune.budget is {TUNE_BUDGET}: each launch takes about 50 s on 2 cores.\n"
    )
    out.write_text(header + text.replace(line, f"path: {STAGED_PATH}\n"), encoding="utf-8")
    return out
