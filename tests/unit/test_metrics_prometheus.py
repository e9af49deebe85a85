"""The Prometheus text-format parser, on a real vLLM scrape and on synthesized corner cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflashops.errors import ParseError
from dflashops.metrics.prometheus import Histogram, Scrape, escape_label_value, parse_exposition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
REAL = FIXTURES / "real-vllm-0.32.0-cpu-ngram.txt"
EDGE = FIXTURES / "synthesized-openmetrics-edge-cases.txt"


@pytest.fixture(scope="module")
def real() -> Scrape:
    return parse_exposition(REAL.read_text())


@pytest.fixture(scope="module")
def edge() -> Scrape:
    return parse_exposition(EDGE.read_text())


def test_real_scrape_counts_every_sample(real: Scrape) -> None:
    lines = [ln for ln in REAL.read_text().splitlines() if ln and not ln.startswith("#")]
    assert sum(len(f.samples) for f in real.families.values()) == len(lines)


def test_real_scrape_classic_counter_layout(real: Scrape) -> None:
    # prometheus_client's classic output types the "_total" and "_created" samples themselves
    family = real.families["vllm:spec_decode_num_drafts_total"]
    assert family.type == "counter"
    assert family.help == "Number of spec decoding drafts."
    assert real.families["vllm:spec_decode_num_drafts_created"].type == "gauge"
    assert real.value("vllm:spec_decode_num_drafts_total", model_name="tiny") == 164.0
    assert real.total("vllm:spec_decode_num_accepted_tokens_per_pos_total") == 592.0
    assert real.value("vllm:spec_decode_num_drafts_created") == pytest.approx(1.796216389059995e9)


def test_real_scrape_labels_and_filters(real: Scrape) -> None:
    per_pos = real.samples("vllm:spec_decode_num_accepted_tokens_per_pos_total", engine="0")
    assert [(s.labels["position"], s.value) for s in per_pos] == [
        ("0", 164.0),
        ("1", 146.0),
        ("2", 145.0),
        ("3", 137.0),
    ]
    assert real.samples("vllm:spec_decode_num_drafts_total", model_name="nope") == []
    assert real.total("vllm:not_there") is None
    with pytest.raises(ParseError, match="4 series match"):
        real.value("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    info = real.samples("vllm:cache_config_info")[0]
    assert info.labels["block_size"] == "128"
    assert info.labels["kv_cache_dtype_skip_layers"] == "[]"


def test_real_scrape_histograms(real: Scrape) -> None:
    family = real.families["vllm:request_generation_tokens"]
    assert family.type == "histogram"
    assert {s.name for s in family.samples} == {
        "vllm:request_generation_tokens_bucket",
        "vllm:request_generation_tokens_count",
        "vllm:request_generation_tokens_sum",
    }
    (hist,) = real.histograms("vllm:request_generation_tokens", model_name="tiny")
    assert hist.labels == {"engine": "0", "model_name": "tiny"}
    assert hist.count == 9.0 and hist.sum == 832.0
    assert hist.buckets[-1] == (math.inf, 9.0)
    assert hist.mean == pytest.approx(832 / 9)
    # 5 of 9 requests made <=100 tokens, all <=200: the median lies in (50, 100]
    assert 50.0 < (hist.quantile(0.5) or 0) <= 100.0
    by_handler = real.histograms("http_request_duration_seconds")
    assert sorted(h.labels["handler"] for h in by_handler) == [
        "/v1/chat/completions",
        "/v1/completions",
    ]
    assert all("le" not in h.labels for h in by_handler)


def test_summary_family(real: Scrape) -> None:
    family = real.families["http_request_size_bytes"]
    assert family.type == "summary"
    assert real.value("http_request_size_bytes_sum", handler="/v1/completions") == 782.0


def test_escapes_in_labels_and_help(edge: Scrape) -> None:
    family = edge.families["escapes_total"]
    assert family.help == "A help text with a backslash \\ and a newline \n inside."
    (sample,) = family.samples
    assert sample.labels == {
        "path": "C:\\temp\\x",
        "quote": 'say "hi"',
        "multi": "a\nb",
        "comma": "a,b}c= d",
    }
    assert sample.value == 3.0
    assert sample.timestamp == 1700000000000.0


def test_special_values(edge: Scrape) -> None:
    def value(kind: str) -> float:
        got = edge.value("odd_values", kind=kind)
        assert got is not None
        return got

    assert math.isnan(value("nan"))
    assert value("pinf") == math.inf
    assert value("ninf") == -math.inf
    assert value("exp") == 0.0015
    assert value("int") == 42.0  # trailing comma in the label set
    assert value("spaced") == -7.25


def test_openmetrics_family_names_own_their_suffixes(edge: Scrape) -> None:
    family = edge.families["om_requests"]
    assert family.type == "counter"
    assert family.unit == "requests"
    assert [s.name for s in family.samples] == ["om_requests_total", "om_requests_created"]
    assert edge.value("om_requests_total", code="200") == 10.0  # exemplar ignored
    assert "om_requests_total" not in edge.families


def test_histogram_and_summary_without_help(edge: Scrape) -> None:
    (hist,) = edge.histograms("latency_seconds")
    assert hist.buckets == ((0.1, 2.0), (0.5, 6.0), (1.0, 9.0), (math.inf, 10.0))
    assert hist.quantile(0.5) == pytest.approx(0.1 + 0.4 * (5 - 2) / (6 - 2))
    assert hist.quantile(0.0) == 0.0
    assert hist.quantile(0.95) == 1.0  # in the +Inf bucket: the largest finite bound
    assert edge.families["rpc_seconds"].type == "summary"
    assert edge.value("rpc_seconds", quantile="0.99") == 0.9


def test_quoted_metric_names_untyped_and_eof(edge: Scrape) -> None:
    assert edge.value("my.dotted.metric") == 1.0
    assert edge.samples("my.dotted.metric")[0].labels == {"label.with.dots": "v"}
    assert edge.families["no_type_or_help"].type == "untyped"
    assert "after_eof_is_ignored" not in edge


def test_histogram_delta() -> None:
    before = Histogram("h", {}, ((1.0, 1.0), (math.inf, 2.0)), 2.0, 1.5)
    after = Histogram("h", {}, ((1.0, 4.0), (math.inf, 6.0)), 6.0, 5.5)
    window = after - before
    assert window.buckets == ((1.0, 3.0), (math.inf, 4.0))
    assert window.count == 4.0 and window.mean == 1.0
    with pytest.raises(ValueError, match="bucket bounds differ"):
        _ = after - Histogram("h", {}, ((2.0, 1.0), (math.inf, 2.0)), 2.0, 1.5)
    assert Histogram("h", {}, (), 0.0, 0.0).quantile(0.5) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('m{a="1"', "unterminated|expected"),
        ("m 1 2 3", "expected a value and an optional timestamp"),
        ("m abc", "bad value 'abc'"),
        ("m 1_000", "bad value"),
        ("m{a=1} 1", "must be quoted"),
        ('m{a="x\\q"} 1', "invalid escape"),
        ('m{a="1",a="2"} 1', "given twice"),
        ('m{1a="x"} 1', "bad label name"),
        ("# TYPE m sometype", "unknown metric type"),
        ("m1", "expected whitespace"),
        ('{a="b"} 1', "expected a metric name"),
    ],
)
def test_malformed_lines_name_their_line(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as caught:
        parse_exposition(f"# HELP ok fine\nok 1\n{text}\n")
    assert caught.value.message.startswith("line 3:")


def test_type_after_samples_is_rejected() -> None:
    with pytest.raises(ParseError, match="after its samples"):
        parse_exposition("m 1\n# TYPE m counter\n")


def test_crlf_and_blank_lines() -> None:
    scrape = parse_exposition('# TYPE a gauge\r\n\r\na 1\r\n  \nb{x="y"}\t2\n')
    assert scrape.value("a") == 1.0
    assert scrape.value("b", x="y") == 2.0


_label_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), _label_values))
def test_label_values_round_trip(labels: dict[str, str]) -> None:
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
    scrape = parse_exposition(f"metric{{{body}}} 1.5\n")
    (sample,) = scrape.samples("metric")
    assert dict(sample.labels) == labels
    assert sample.value == 1.5
