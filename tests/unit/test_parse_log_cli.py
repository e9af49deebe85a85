"""`dflashops parse-log`: exit codes and the notes that say what the rates mean."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dflashops.cli import cli

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "public"


def test_a_log_with_none_of_the_known_lines_is_invalid_input(tmp_path: Path) -> None:
    path = tmp_path / "quiet.log"
    # real startup lines of a vLLM server (from the lab's captured log): no stats at all
    path.write_text(
        "(APIServer pid=8051) INFO 12-02 12:59:17 [model.py:733] Resolved architecture: "
        "Qwen3ForCausalLM\n(APIServer pid=8051) INFO 12-02 12:59:17 [model.py:2152] Using max "
        "model len 512\n"
    )
    result = CliRunner().invoke(cli, ["parse-log", str(path)])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert message.startswith(f"error: {path}: no throughput or spec-decode lines")
    assert "hint: parse-log reads vLLM V1 'Engine NNN: Avg prompt throughput" in message
    assert "SGLang 'Decode batch" in message and "--disable-log-stats" in message
    as_json = CliRunner().invoke(cli, ["parse-log", str(path), "--json"])
    assert as_json.exit_code == 2 and as_json.stdout == ""


def test_notes_say_which_formula_each_rate_is() -> None:
    sglang = CliRunner().invoke(
        cli,
        ["parse-log", str(PUBLIC / "sglang-0.5.3-eagle3-accept-rate-with-bonus.log")],
        env={"COLUMNS": "200"},
    )
    assert sglang.exit_code == 0, sglang.output
    text = " ".join(sglang.output.split())
    assert "SGLang 'accept rate' = accept len / draft tokens per step" in text
    assert "4 draft tokens per step" in text and "vLLM V1's definition" in text
    v0 = CliRunner().invoke(
        cli, ["parse-log", str(PUBLIC / "vllm-0.6.3-v0-draft-k3.log")], env={"COLUMNS": "200"}
    )
    assert "acceptance length = emitted / steps" in " ".join(v0.output.split())
    assert "2.39" in v0.output


def test_json_carries_both_rates_and_the_cut_lines() -> None:
    result = CliRunner().invoke(
        cli, ["parse-log", str(PUBLIC / "sglang-npu-lines-cut-mid-way.log"), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (window,) = document["throughput_windows"]
    assert window["truncated"] is True and window["generation_throughput"] == 863.65
    assert document["engine"] == "sglang"
    assert any("cut short" in note for note in document["notes"])
    v0 = json.loads(
        CliRunner()
        .invoke(cli, ["parse-log", str(PUBLIC / "vllm-0.6.3-v0-draft-k3.log"), "--json"])
        .stdout
    )
    (spec,) = v0["spec_decode_windows"]
    assert spec["acceptance_rate_pct"] == 64.2  # as printed (0.642)
    assert round(spec["draft_acceptance_rate_pct"], 2) == 46.42  # kept drafts / drafts
    assert spec["acceptance_rate_formula"] == "v0-accepted/drafted"
