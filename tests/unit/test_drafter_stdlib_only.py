"""The validation core must run where only the standard library is importable (the bundled
server preflight runs it inside an engine venv)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fixtures.drafter import GUESSED, REF_36, TARGET

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"pydantic", "pydantic_core", "click", "rich", "yaml"}:
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())
    from dflashops.drafter import check_paths, corrected_config, load_registry

    run = check_paths(sys.argv[1], target=sys.argv[2], ref=sys.argv[3])
    new, changes = corrected_config(run.drafter.config, load_registry().resolve(sys.argv[3]))
    print(run.result.exit_code, sorted(run.result.keys("error")), len(changes))
    """
)


def test_core_runs_without_pydantic_click_or_rich() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(GUESSED), str(TARGET), REF_36],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == (
        "4 ['dflash_config.mask_token_id', 'dflash_config.target_layer_ids', 'layer_types'] 4"
    )
