"""BenchReport: vLLM-compatible keys, save/load round trip, version and error handling;
the per-level statistics; workloads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflashops.bench.models import (
    SCHEMA_VERSION,
    BenchReport,
    RequestRecord,
)
from dflashops.bench.stats import aggregate_level, describe, percentile, tpot_ms
from dflashops.bench.workload import (
    BUILTIN_WORKLOADS,
    REFERENCE_PROMPT,
    load_workload,
)
from dflashops.errors import BenchmarkError, ConfigError
from dflashops.metrics.spec_decode import SpecDecodeDelta
from tests.support.reports import bench_report

# The aggregate keys `vllm bench serve --save-result` writes that we share (bench-anchors.md §1.2).
VLLM_KEYS = {
    "completed",
    "failed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_concurrency",
    *(
        f"{s}_{m}_ms"
        for s in ("mean", "median", "std", "p90", "p99")
        for m in ("ttft", "tpot", "itl", "e2el")
    ),
    "spec_decode_acceptance_length",
    "spec_decode_acceptance_rate",
    "spec_decode_num_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates",
}


def record(
    pid: str = "p",
    *,
    ttft: float = 100.0,
    e2el: float = 1000.0,
    out: int = 91,
    itl: tuple[float, ...] = (30.0, 30.0),
    ok: bool = True,
) -> RequestRecord:
    return RequestRecord(
        prompt_id=pid,
        success=ok,
        error=None if ok else "HTTP 500: boom",
        start_s=0.0,
        ttft_ms=ttft,
        e2el_ms=e2el,
        tpot_ms=tpot_ms(ttft, e2el, out),
        itl_ms=list(itl),
        prompt_tokens=10,
        output_tokens=out if ok else None,
        chunks=len(itl) + 1,
    )


def spec_delta() -> SpecDecodeDelta:
    return SpecDecodeDelta(
        num_drafts=100,
        num_draft_tokens=400,
        num_accepted_tokens=270,
        accepted_per_position=[95, 75, 60, 40],
        generation_tokens=370,
    )


def make_report() -> BenchReport:
    level = aggregate_level(
        [record("a"), record("b", ttft=200.0, e2el=2000.0), record("c", ok=False)],
        max_concurrency=2,
        duration=4.0,
        spec=spec_delta(),
    )
    return bench_report(
        [level],
        container="lab-ct1",
        engine="vllm",
        engine_version="0.32.0",
        model="models/tiny-qwen3",
        drafter="models/tiny-dflash",
        method="dflash",
        num_speculative_tokens=4,
        server_args={"max_model_len": 512, "enforce_eager": True},
    )


def test_level_uses_vllm_key_names_and_units() -> None:
    level = make_report().levels[0]
    dumped = level.model_dump()
    assert VLLM_KEYS - set(dumped) == set()
    assert (level.completed, level.failed, level.duration) == (2, 1, 4.0)
    assert level.total_output_tokens == 182 and level.total_input_tokens == 20
    assert level.output_throughput == pytest.approx(182 / 4.0)
    assert level.request_throughput == pytest.approx(0.5)
    assert level.total_token_throughput == pytest.approx(202 / 4.0)
    assert level.mean_ttft_ms == pytest.approx(150.0)
    assert level.median_ttft_ms == pytest.approx(150.0)
    assert level.std_ttft_ms == pytest.approx(50.0)
    assert level.mean_tpot_ms == pytest.approx((900 / 90 + 1800 / 90) / 2)
    assert level.mean_itl_ms == pytest.approx(30.0)
    assert level.mean_tokens_per_chunk == pytest.approx(182 / 6)
    assert level.spec_decode_acceptance_rate == pytest.approx(67.5)  # percent, like vLLM
    assert level.spec_decode_acceptance_length == pytest.approx(3.7)
    assert level.spec_decode_per_position_acceptance_rates == pytest.approx([0.95, 0.75, 0.6, 0.4])
    assert (level.spec_decode_num_drafts, level.spec_decode_draft_tokens) == (100, 400)
    assert level.spec_decode_accepted_tokens == 270
    assert level.server_generation_tokens == 370
    assert level.errors == ["HTTP 500: boom"]
    assert level.metric("p99", "tpot") == level.p99_tpot_ms
    assert "requests" not in level.summary()


def test_save_load_round_trip(tmp_path: Path) -> None:
    report = make_report()
    path = report.save(tmp_path / "deep" / "run.json")
    assert path.exists() and not list(path.parent.glob(".*tmp"))
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["kind"] == "dflashops-bench"
    assert data["levels"][0]["mean_ttft_ms"] == pytest.approx(150.0)
    assert data["config"]["dflashops_version"]
    loaded = BenchReport.load(path)
    assert loaded == report
    assert loaded.level(2) is not None and loaded.level(3) is None
    assert loaded.display_label() == "dflash k=4"


def test_room_for_tune_compare_roofline(tmp_path: Path) -> None:
    report = make_report().model_copy(
        update={
            "tune": {"recommended_k": 6, "candidates": [{"k": 4, "tok_s": 100.0}]},
            "roofline": {"ceiling_tok_s": 300.0},
            "extras": {"note": "lab"},
        }
    )
    loaded = BenchReport.load(report.save(tmp_path / "r.json"))
    assert loaded.tune == {"recommended_k": 6, "candidates": [{"k": 4, "tok_s": 100.0}]}
    assert loaded.roofline == {"ceiling_tok_s": 300.0} and loaded.compare is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ('{"kind": "something-else"}', "not a dflashops benchmark report"),
        ('{"kind": "dflashops-bench", "schema_version": 99}', "schema_version 99 is newer"),
        ('{"kind": "dflashops-bench", "schema_version": 1}', "config: required key is missing"),
    ],
)
def test_load_errors_are_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(BenchmarkError, match=message) as caught:
        BenchReport.load(path)
    assert str(path) in caught.value.one_line()
    assert "\n" not in caught.value.one_line()


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    data = json.loads(make_report().model_dump_json())
    data["levels"][0]["mean_ttft"] = 1.0  # a typo must not load silently
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BenchmarkError, match=r"levels\[0\]\.mean_ttft: unknown key"):
        BenchReport.load(path)
    with pytest.raises(BenchmarkError, match="cannot read"):
        BenchReport.load(tmp_path / "missing.json")


def test_no_spec_decode_leaves_keys_empty() -> None:
    plain = SpecDecodeDelta(
        spec_decode=False,
        num_drafts=None,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        accepted_per_position=[],
        generation_tokens=50,
    )
    level = aggregate_level([record()], max_concurrency=1, duration=1.0, spec=plain)
    assert level.spec_decode_draft_tokens is None
    assert level.spec_decode_acceptance_rate is None
    assert level.server_generation_tokens == 50


def test_empty_level() -> None:
    level = aggregate_level([record(ok=False)], max_concurrency=4, duration=0.0)
    assert (level.completed, level.failed) == (0, 1)
    assert level.mean_ttft_ms is None and level.p99_itl_ms is None
    assert level.output_throughput == 0.0
    assert level.mean_tokens_per_chunk is None


def test_tpot_definition() -> None:
    assert tpot_ms(100.0, 1000.0, 91) == pytest.approx(10.0)
    assert tpot_ms(100.0, 1000.0, 1) is None  # one token: no decode time
    assert tpot_ms(None, 1000.0, 10) is None


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy(values: list[float], p: float) -> None:
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-6)


def test_describe() -> None:
    stats = describe([1.0, 2.0, 3.0, 4.0])
    assert stats["mean"] == 2.5 and stats["median"] == 2.5
    assert stats["std"] == pytest.approx(float(np.std([1, 2, 3, 4])))
    assert stats["p99"] == pytest.approx(float(np.percentile([1, 2, 3, 4], 99)))
    assert describe([]) == dict.fromkeys(("mean", "median", "std", "p90", "p99"))
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    assert not math.isnan(describe([5.0])["std"] or 0.0)


def test_builtin_workloads() -> None:
    smoke = load_workload("smoke")
    assert [p.prompt for p in smoke.prompts] == [REFERENCE_PROMPT]
    assert (smoke.max_tokens, smoke.temperature, smoke.ignore_eos) == (2000, 0.0, False)
    mixed = BUILTIN_WORKLOADS["mixed"]
    assert mixed.prompts[0].prompt == REFERENCE_PROMPT
    assert len({p.id for p in mixed.prompts}) == len(mixed.prompts) >= 6
    assert [p.id for p in mixed.requests(10)][-2:] == [mixed.prompts[0].id, mixed.prompts[1].id]
    dialogue = next(p for p in mixed.prompts if p.messages)
    assert dialogue.chat_messages()[0]["role"] == "system"
    assert load_workload("mixed") == mixed  # deterministic: same object content every time


def test_jsonl_workload(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(
        '{"prompt": "one"}\n\n'
        '{"id": "two", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}\n'
    )
    workload = load_workload(str(path))
    assert workload.name == "mine" and workload.source == str(path)
    assert [p.id for p in workload.prompts] == ["mine-1", "two"]
    assert workload.prompts[1].max_tokens == 5
    assert workload.prompts[1].text() == "hi"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "a"}\nnot json\n', r":2: not JSON"),
        ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}\n', "exactly one"),
        ("[1, 2]\n", "JSON object"),
        ('{"prompt": "a", "max_tokens": 0}\n', r":1:max_tokens: Input should be greater than 0"),
        ('{"prompt": "a", "color": "red"}\n', r":1:color: unknown key"),
        ("\n\n", "no requests"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_workload(str(path))


def test_unknown_workload() -> None:
    with pytest.raises(ConfigError, match="no built-in workload or file") as caught:
        load_workload("nope")
    assert caught.value.hint is not None and "smoke" in caught.value.hint
