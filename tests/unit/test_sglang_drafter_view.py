"""SGLang and a speculators-layout DFlash drafter: the check says it is served through a z-lab
view, launch renders the view's folder into SGLang's argv, and the bundled server writes it
(config.json converted as vLLM converts it, every other file linked, nothing copied)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dflashops.deployment.layout import Layout
from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import ZLAB_VIEW_KEY, parse_engine
from dflashops.drafter.formats import checked_view
from dflashops.launch.render import RenderInputs, build_spec
from dflashops.launch.validation import DrafterValidation
from dflashops.playbook.models import Playbook
from dflashops.server.drafter_view import ViewError, write_view, zlab_config
from dflashops.server.preflight import ExitCode, run_preflight
from dflashops.server.spec import ServerSpec, SpecError
from tests.fixtures.drafter import CORRECTED, REF_36, TARGET, config
from tests.fixtures.drafter.speculators_layout import as_speculators

SGLANG = "sglang==0.5.16"


def speculators_drafter(tmp_path: Path) -> Path:
    drafter = tmp_path / "drafter"
    shutil.copytree(CORRECTED, drafter)
    (drafter / "config.json").write_text(json.dumps(as_speculators(config(CORRECTED))))
    return drafter


def findings(drafter: Path, engine: str) -> dict[str, str]:
    run = check_paths(str(drafter), target=str(TARGET), ref=REF_36, engine=parse_engine(engine))
    return {f.key: f.severity for f in run.result.findings}


def test_sglang_reads_a_speculators_drafter_through_a_view_and_vllm_as_it_is(
    tmp_path: Path,
) -> None:
    drafter = speculators_drafter(tmp_path)
    seen = findings(drafter, SGLANG)
    assert seen[ZLAB_VIEW_KEY] == "info" and "error" not in seen.values()
    assert ZLAB_VIEW_KEY not in findings(drafter, "vllm==0.32.0")
    assert ZLAB_VIEW_KEY not in findings(CORRECTED, SGLANG)  # z-lab already: no view


def test_a_z_lab_config_without_model_type_is_still_refused_for_sglang(tmp_path: Path) -> None:
    drafter = tmp_path / "drafter"
    shutil.copytree(CORRECTED, drafter)
    data = config(CORRECTED)
    del data["model_type"]
    (drafter / "config.json").write_text(json.dumps(data))
    assert findings(drafter, SGLANG)["model_type"] == "error"


def test_the_view_is_the_z_lab_config_and_links_to_every_other_file(tmp_path: Path) -> None:
    drafter = speculators_drafter(tmp_path)
    view = tmp_path / "state" / "drafter-zlab"

    said = write_view(drafter, view, TARGET)

    written = json.loads((view / "config.json").read_text())
    vllms = checked_view(json.loads((drafter / "config.json").read_text()))
    # SGLang range-checks target_layer_ids against num_target_layers (else the drafter's own
    # layer count): the view adds the target's, which vLLM's conversion has no use for
    target_layers = json.loads((TARGET / "config.json").read_text())
    target_layers = target_layers.get("text_config", target_layers)["num_hidden_layers"]
    assert written["dflash_config"].pop("num_target_layers") == target_layers
    assert written == vllms
    assert written["model_type"] == "qwen3" and "speculators_model_type" not in written
    others = sorted(p.name for p in drafter.iterdir() if p.name != "config.json")
    assert sorted(p.name for p in view.iterdir() if p.name != "config.json") == others
    for name in others:
        assert (view / name).is_symlink() and (view / name).readlink() == drafter / name
    assert said == f"{view}: z-lab config.json of {drafter}, {len(others)} file(s) linked"


def test_writing_it_again_follows_the_drafter_and_touches_nothing_else(tmp_path: Path) -> None:
    drafter = speculators_drafter(tmp_path)
    view = tmp_path / "view"
    write_view(drafter, view, TARGET)
    (drafter / "extra.txt").write_text("new")
    gone = next(p for p in drafter.iterdir() if p.suffix == ".json" and p.name != "config.json")
    gone.unlink()
    (view / ".config.json.tmp").write_text("{")  # a write cut short before

    write_view(drafter, view, TARGET)

    assert (view / "extra.txt").readlink() == drafter / "extra.txt"
    assert not (view / gone.name).is_symlink()  # the stale link went; the original is gone too
    assert not (view / ".config.json.tmp").exists()
    (view / "mine.bin").write_text("not a link")
    with pytest.raises(ViewError, match="not a link this view made"):
        write_view(drafter, view, TARGET)
    assert (view / "mine.bin").read_text() == "not a link"


def test_the_targets_layer_count_goes_in_when_it_is_known() -> None:
    data = as_speculators(config(CORRECTED))
    assert zlab_config(data, 64)["dflash_config"]["num_target_layers"] == 64
    assert "num_target_layers" not in zlab_config(data, None)["dflash_config"]


def test_a_z_lab_drafter_has_nothing_to_convert(tmp_path: Path) -> None:
    with pytest.raises(ViewError, match="not in the speculators layout"):
        write_view(CORRECTED, tmp_path / "view", TARGET)


def book(engine: str) -> Playbook:
    name, _, version = engine.partition("==")
    return Playbook.model_validate(
        {
            "name": "t",
            "model": {"path": "/models/target"},
            "drafter": {"method": "dflash", "model": {"path": "/models/drafter"}},
            "engine": {"name": name, "version": version},
            "server": {"num_speculative_tokens": 4},
        }
    )


def test_launch_renders_the_view_for_sglang_only() -> None:
    layout = Layout(state="/var/lib/dflashops")
    inputs = RenderInputs(supervisor="fallback", venv_python="/v/bin/python", layout=layout)
    viewed = RenderInputs(**{**inputs.__dict__, "zlab_view": True})

    spec = build_spec(book(SGLANG), viewed)

    at = spec.argv.index("--speculative-draft-model-path")
    assert spec.argv[at + 1] == "/var/lib/dflashops/drafter-zlab" == spec.drafter_view
    assert spec.drafter == "/models/drafter"  # preflight checks the original
    plain = build_spec(book(SGLANG), inputs)
    assert plain.drafter_view is None and "/models/drafter" in plain.argv
    assert "drafter_view" not in plain.to_dict()  # a deployed spec stays byte-identical
    assert build_spec(book("vllm==0.32.0"), viewed).drafter_view is None


def test_the_validation_tells_launch_to_use_the_view(tmp_path: Path) -> None:
    drafter = speculators_drafter(tmp_path)
    run = check_paths(str(drafter), target=str(TARGET), ref=REF_36, engine=parse_engine(SGLANG))
    validation = DrafterValidation(run.result.summary.status, run.result.findings)
    assert validation.zlab_view and not validation.failed
    assert not DrafterValidation("clean").zlab_view


def spec(tmp_path: Path, drafter: Path, view: Path | None, **extra: Any) -> ServerSpec:
    return ServerSpec(
        engine="sglang",
        engine_version="0.5.16",
        argv=["true"],
        model=str(TARGET),
        drafter=str(drafter),
        method="dflash",
        num_speculative_tokens=4,
        expect_cuda=False,
        drafter_view=str(view) if view else None,
        check_files=False,  # the fixture target holds a config, no weights
        **extra,
    )


def test_the_servers_preflight_writes_the_view_before_exec(tmp_path: Path) -> None:
    drafter = speculators_drafter(tmp_path)
    view = tmp_path / "drafter-zlab"

    report = run_preflight(spec(tmp_path, drafter, view, drafter_ref=REF_36), {"PATH": "/bin"})

    assert report.ok, report.message
    (written,) = [c for c in report.checks if c.name == "drafter-view"]
    assert written.detail.startswith(f"{view}: z-lab config.json of {drafter}")
    assert json.loads((view / "config.json").read_text())["model_type"] == "qwen3"


def test_a_view_that_cannot_be_written_stops_the_start_with_the_reason(tmp_path: Path) -> None:
    drafter = speculators_drafter(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")

    report = run_preflight(spec(tmp_path, drafter, blocker / "view"), {"PATH": "/bin"})

    assert not report.ok and report.failed_check == "drafter-view"
    assert report.exit_code == ExitCode.DRAFTER_FILES
    assert "cannot write the drafter view" in (report.message or "")


def test_a_view_needs_a_drafter_and_an_absolute_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="drafter_view"):
        spec(tmp_path, CORRECTED, Path("relative"))


def zlab_drafter(tmp_path: Path, **dflash: Any) -> Path:
    drafter = tmp_path / "zlab"
    shutil.copytree(CORRECTED, drafter)
    data = config(CORRECTED)
    data["dflash_config"].pop("num_target_layers", None)
    data.pop("num_target_layers", None)
    data["dflash_config"].update(dflash)
    (drafter / "config.json").write_text(json.dumps(data))
    return drafter


def test_sglang_refuses_layer_ids_past_the_bound_it_falls_back_to(tmp_path: Path) -> None:
    # without num_target_layers SGLang checks the ids against the drafter's own 5 layers (a real
    # 0.5.16 stopped with "out-of-range layer id"); vLLM does not read the key
    drafter = zlab_drafter(tmp_path)
    assert findings(drafter, SGLANG)["dflash_config.num_target_layers"] == "error"
    assert findings(drafter, "sglang==0.5.12")["dflash_config.num_target_layers"] == "warning"
    assert "dflash_config.num_target_layers" not in findings(drafter, "vllm==0.32.0")
    run = check_paths(str(drafter), target=str(TARGET), engine=parse_engine(SGLANG))
    (bound,) = [f for f in run.result.findings if f.key == "dflash_config.num_target_layers"]
    assert "by the drafter's own 5 layers" in bound.found


def test_a_stated_bound_or_ids_within_the_drafter_pass(tmp_path: Path) -> None:
    stated = zlab_drafter(tmp_path / "a", num_target_layers=64)
    assert "dflash_config.num_target_layers" not in findings(stated, SGLANG)
    within = zlab_drafter(tmp_path / "b", target_layer_ids=[0, 1, 2, 3, 4])
    assert "dflash_config.num_target_layers" not in findings(within, SGLANG)
