"""The playbook's ``drafter.ref`` reaches the host's preflight (found on the H200, issue 22): a
Qwen3.5/3.6 target fits two registry entries, so without the ref the host's drafter check has no
reference and a guessed config starts with warnings only. The preflight's side is tested in
tests/unit/test_server_preflight.py (``*_ref``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflashops.launch.render import RenderInputs, bundled_ref, render, venv_python
from dflashops.playbook.load import load_playbook
from dflashops.server.spec import ServerSpec, SpecError

GPU_BOOK = Path(__file__).resolve().parents[2] / "playbooks" / "qwen3.6-27b-dflash.yaml"


def spec_of(*overrides: str) -> ServerSpec:
    book = load_playbook(GPU_BOOK, overrides)
    inputs = RenderInputs(supervisor="fallback", venv_python=venv_python(book))
    return render(book, inputs).spec


def test_a_bundled_entry_name_reaches_the_spec() -> None:
    spec = spec_of("drafter.ref=z-lab/Qwen3.6-27B-DFlash")
    assert spec.drafter_ref == "z-lab/Qwen3.6-27B-DFlash"
    assert ServerSpec.from_json(spec.to_json()).drafter_ref == "z-lab/Qwen3.6-27B-DFlash"


def test_an_entry_file_stays_with_launch(tmp_path: Path) -> None:
    # a file exists on the operator's machine only: launch's own check used it
    entry = tmp_path / "mine.json"
    entry.write_text("{}")
    assert bundled_ref(str(entry)) is None
    assert bundled_ref(None) is None


def test_no_ref_keeps_deployed_specs_byte_identical() -> None:
    spec = spec_of("drafter.ref=null")
    assert spec.drafter_ref is None
    assert "drafter_ref" not in json.loads(spec.to_json())


def test_the_key_is_typed() -> None:
    data = spec_of().to_dict()
    with pytest.raises(SpecError, match="drafter_ref must be"):
        ServerSpec.from_dict({**data, "drafter_ref": 3})
