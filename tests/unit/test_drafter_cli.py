"""``dflashops drafter`` through the real command group: exit codes and --json documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dflashops.cli import cli
from dflashops.drafter.report import DrafterCheckReport
from dflashops.errors import DrafterError
from tests.fixtures.drafter import CORRECTED, GUESSED, REF_36, TARGET


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["drafter", *args])


def doc(result: Result) -> Any:
    """stdout must be exactly one JSON document."""
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ((str(CORRECTED), "--target", str(TARGET), "--ref", REF_36, "--k", "15"), 0),
        ((str(GUESSED),), 3),
        ((str(GUESSED), "--target", str(TARGET)), 4),
        ((str(GUESSED), "--ref", REF_36), 4),
        ((str(CORRECTED), "--engine", "vllm==0.25.0"), 4),
        ((str(CORRECTED), "--engine", "vllm==0.26.0", "--target", str(TARGET)), 0),
    ],
)
def test_check_exit_codes(args: tuple[str, ...], code: int) -> None:
    result = run("check", *args)
    assert result.exit_code == code, result.output
    assert doc(run("check", *args, "--json"))["exit_code"] == code


def test_check_table_names_the_findings() -> None:
    result = run("check", str(GUESSED), "--ref", REF_36, "--target", str(TARGET))
    for text in ("layer_types", "dflash_config.target_layer_ids", "248070", "errors: 3 errors"):
        assert text in result.stdout


def test_check_json_is_one_document_with_summary_and_required_env() -> None:
    result = run("check", str(CORRECTED), "--engine", "vllm==0.28.0", "--json")
    data = doc(result)
    assert data["kind"] == "drafter-check"
    assert data["status"] == "clean" and data["exit_code"] == 0
    assert data["required_env"] == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert data["engine"] == "vllm==0.28.0"
    assert data["fingerprint"].startswith("sha256:")
    assert result.stderr == ""


def test_check_json_findings_for_the_incident() -> None:
    data = doc(run("check", str(GUESSED), "--ref", REF_36, "--json"))
    assert data["summary"] == {"errors": 3, "warnings": 0, "infos": 1}
    assert data["ref"] == REF_36 and data["ref_matched_by"] == "ref"
    errors = {f["key"] for f in data["findings"] if f["severity"] == "error"}
    assert errors == {
        "layer_types",
        "dflash_config.target_layer_ids",
        "dflash_config.mask_token_id",
    }
    assert all(
        set(f) == {"severity", "key", "expected", "found", "why", "check"} for f in data["findings"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("check", "/nonexistent/drafter"), "no such file or directory"),
        (("check", str(GUESSED), "--ref", "nobody/nothing"), "no reference drafter"),
        (("check", str(GUESSED), "--target", str(GUESSED.parent)), "has no config.json"),
        (("diff", "/nonexistent/drafter", "--against", REF_36), "no such file"),
    ],
)
def test_dflashops_errors_exit_1_with_one_line(args: tuple[str, ...], message: str) -> None:
    result = run(*args, "--json")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_unreadable_config_exits_1(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    result = run("check", str(tmp_path))
    assert result.exit_code == 1
    assert "not valid JSON" in result.stderr and "line 1" in result.stderr


@pytest.mark.parametrize("args", [("--engine", "vllm>=1"), ("--k", "0")])
def test_bad_options_are_usage_errors(args: tuple[str, ...]) -> None:
    assert run("check", str(GUESSED), *args).exit_code == 2


def test_diff_against_a_reference_and_a_file() -> None:
    data = doc(run("diff", str(GUESSED), "--against", REF_36, "--json"))
    assert data["against_kind"] == "registry"
    assert {d["key"] for d in data["differences"]} == {
        "layer_types",
        "sliding_window",
        "dflash_config.mask_token_id",
        "dflash_config.target_layer_ids",
    }
    data = doc(run("diff", str(GUESSED), "--against", str(CORRECTED), "--json"))
    assert data["against_kind"] == "file"
    assert len(data["differences"]) == 4
    text = run("diff", str(CORRECTED), "--against", REF_36)
    assert text.exit_code == 0 and "no differences" in " ".join(text.stdout.split())


def test_diff_against_an_entry_file(tmp_path: Path) -> None:
    from dflashops.drafter import load_registry

    entry = json.loads(Path(load_registry().resolve(REF_36).file).read_text())
    (tmp_path / "e.json").write_text(json.dumps(entry | {"name": "me/e"}))
    data = doc(run("diff", str(GUESSED), "--against", str(tmp_path / "e.json"), "--json"))
    assert data["against_kind"] == "registry" and len(data["differences"]) == 4


def test_refs_lists_entries_with_certain_keys() -> None:
    rows = doc(run("refs", "--json"))
    by_name = {r["name"]: r for r in rows}
    assert "layer_types" in by_name[REF_36]["certain"]
    assert "layer_types" in by_name["z-lab/Qwen3.5-27B-DFlash"]["certain"]
    # one unresolved copy of the 122B drafter's config: nothing there is held as certain
    assert "dflash_config.mask_token_id" in by_name["z-lab/Qwen3.5-122B-A10B-DFlash"]["not_certain"]
    assert run("refs").exit_code == 0


def test_report_save_load_round_trip(tmp_path: Path) -> None:
    data = doc(run("check", str(GUESSED), "--ref", REF_36, "--json"))
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    report = DrafterCheckReport.load(path)
    assert report.exit_code == 4 and report.result().keys("error") == {
        "layer_types",
        "dflash_config.target_layer_ids",
        "dflash_config.mask_token_id",
    }
    report.save(tmp_path / "again.json")
    assert DrafterCheckReport.load(tmp_path / "again.json") == report
    path.write_text(json.dumps(data | {"surprise": 1}))
    with pytest.raises(DrafterError, match="surprise"):
        DrafterCheckReport.load(path)
