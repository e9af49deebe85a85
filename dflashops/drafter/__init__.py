"""DFlash drafter configs: read, validate, compare with a reference, correct.

Standard library only (no pydantic, click or rich) in everything listed here: the bundled server
preflight imports it inside an engine venv. ``report`` (pydantic) and ``view`` (rich) are the CLI
side and are imported only by ``dflashops.cli.drafter``.
``fetch`` (model metadata out of a container) and ``push`` need the SSH layer: nothing in the
package imports them.

- ``files.read_drafter`` / ``read_target`` -> ``DrafterFiles`` / ``TargetFiles``
- ``formats``: z-lab's layout and the speculators library's, and the one view the checks read
- ``registry.load_registry()`` -> ``Registry`` (``.resolve(ref)``, ``.match(drafter)``)
- ``validate.validate_drafter(drafter, target, ref, engine, k)`` -> ``CheckResult``
- ``check.check_paths`` / ``diff_paths``: the above from command-line locations
- ``correct.corrected_config(config, entry)`` -> ``(new_config, changes)`` (for ``drafter push``)
"""

from __future__ import annotations

from dflashops.drafter.check import CheckRun, check_paths, diff_paths
from dflashops.drafter.correct import Change, corrected_config
from dflashops.drafter.diff import DiffLine, diff_against_entry, diff_configs
from dflashops.drafter.engine import EngineSpec, parse_engine
from dflashops.drafter.files import DrafterFiles, TargetFiles, read_drafter, read_target
from dflashops.drafter.registry import Match, Registry, RegistryEntry, load_registry
from dflashops.drafter.result import CheckResult, Finding, Summary
from dflashops.drafter.validate import validate_drafter

__all__ = [
    "Change",
    "CheckResult",
    "CheckRun",
    "DiffLine",
    "DrafterFiles",
    "EngineSpec",
    "Finding",
    "Match",
    "Registry",
    "RegistryEntry",
    "Summary",
    "TargetFiles",
    "check_paths",
    "corrected_config",
    "diff_against_entry",
    "diff_configs",
    "diff_paths",
    "load_registry",
    "parse_engine",
    "read_drafter",
    "read_target",
    "validate_drafter",
]
