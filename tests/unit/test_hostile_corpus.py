"""The generated hostile corpus (issue 20, "Done when"): about 2,000 fixed, seeded cases
across inventory, playbook, ``--set``, drafter config, log, tune and report inputs, option
values and file paths, each run through the real CLI in-process (~16 s on one core). Every
case must end with exit 0–4 in under 5 s, without a
traceback and without reaching the catch-all for unexpected exceptions; a failure is one line
(``error:``, or Click's ``Error:`` for an option) that names the file or the option; no secret
appears in any output; ``--json`` output is one strict JSON document.

A failing case prints :meth:`Case.describe`: its id (``pytest -k ID`` runs it alone), the
mutation, the arguments and the files' first bytes.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dflashops.cli import cli
from tests.support.hostile_corpus import FAMILIES, SECRETS, Case, corpus

CASES = corpus()
CASE_SECONDS = 5.0
# Long enough for a message and its hint, short enough that no hostile value is reprinted whole.
MAX_ERROR_CHARS = 1100
# An exception nothing expected reached the CLI's catch-all: a gap the corpus must not find.
CATCH_ALL = "--debug shows the traceback"
# Characters that would act on a terminal (or split a line) if an error echoed them raw.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def test_the_corpus_has_a_thousand_cases_across_every_family() -> None:
    counts = Counter(case.family for case in CASES)
    assert sum(counts.values()) >= 1000, counts
    assert set(counts) == {*FAMILIES, "options", "paths"}, counts
    assert all(count >= 14 for count in counts.values()), counts
    assert len({case.id for case in CASES}) == len(CASES)  # every id reproduces one case


def problems(case: Case, result: Result, elapsed: float, names: list[str]) -> list[str]:
    """What is wrong with one case's outcome (empty when it behaved)."""
    found = []
    if result.exit_code not in case.codes:
        found.append(f"exit {result.exit_code}, expected one of {sorted(case.codes)}")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        found.append(f"exception escaped: {type(result.exception).__name__}: {result.exception}")
    if "Traceback" in result.output:
        found.append("a traceback in the output")
    if elapsed >= CASE_SECONDS:
        found.append(f"took {elapsed:.1f} s")
    leaked = [secret for secret in SECRETS if secret in result.output]
    if leaked:
        found.append(f"secret in the output: {leaked}")
    errors = [line for line in result.stderr.split("\n") if line.startswith(("error:", "Error:"))]
    if result.exit_code in (1, 2):
        if len(errors) != 1:
            found.append(f"{len(errors)} error lines, expected 1")
        for line in errors:
            if CATCH_ALL in line:
                found.append("reached the catch-all for unexpected exceptions")
            if not any(name in line for name in names):
                found.append(f"the error names none of {names}")
            if RAW_CONTROL.search(line):
                found.append("the error line holds raw control characters")
            if len(line) > MAX_ERROR_CHARS:
                found.append(f"the error line has {len(line)} characters")
    elif errors:
        found.append(f"exit {result.exit_code} with an error line")
    if "--json" in case.args and result.exit_code in (0, 3, 4):
        try:
            json.loads(result.stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            found.append(f"--json output is not one strict JSON document: {exc}")
    return found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_hostile_case(case: Case, tmp_path: Path) -> None:
    args, names = case.materialize(tmp_path)
    start = time.monotonic()
    result = CliRunner().invoke(cli, args, env=case.env)
    elapsed = time.monotonic() - start
    found = problems(case, result, elapsed, names)
    assert not found, (
        "; ".join(found)
        + f"\n{case.describe()}\n  exit: {result.exit_code}\n  stderr: {result.stderr[-1500:]!r}"
    )
