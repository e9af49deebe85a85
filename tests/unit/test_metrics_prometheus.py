"""The scrape adapter over ``prometheus_client``'s parsers: a real vLLM scrape, synthesized corner
cases in both formats (Prometheus text 0.0.4 and OpenMetrics 1.0), and the look-ups on top."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from dflashops.errors import ParseError
from dflashops.metrics.prometheus import Histogram, Scrape, parse_exposition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
REAL = FIXTURES / "real-vllm-0.32.0-cpu-ngram.txt"
TEXT_EDGE = FIXTURES / "synthesized-text-0.0.4-edge-cases.txt"
OPENMETRICS_EDGE = FIXTURES / "synthesized-openmetrics-1.0-edge-cases.txt"


@pytest.fixture(scope="module")
def real() -> Scrape:
    return parse_exposition(REAL.read_text())


@pytest.fixture(scope="module")
def edge() -> Scrape:
    return parse_exposition(TEXT_EDGE.read_text())


@pytest.fixture(scope="module")
def openmetrics() -> Scrape:
    return parse_exposition(OPENMETRICS_EDGE.read_text())


def test_real_scrape_counts_every_sample(real: Scrape) -> None:
    lines = [ln for ln in REAL.read_text().splitlines() if ln and not ln.startswith("#")]
    assert sum(len(f.samples) for f in real.families.values()) == len(lines)


def test_real_scrape_classic_counter_layout(real: Scrape) -> None:
    # prometheus_client's classic output types the "_total" sample itself; the library names the
    # family without it (OpenMetrics), and "_created" is a gauge family of its own
    family = real.families["vllm:spec_decode_num_drafts"]
    assert family.type == "counter"
    assert family.help == "Number of spec decoding drafts."
    assert [s.name for s in family.samples] == ["vllm:spec_decode_num_drafts_total"]
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
    family = edge.families["escapes"]
    assert family.help == "A help text with a backslash \\ and a newline \n inside."
    (sample,) = family.samples
    assert sample.name == "escapes_total"
    assert sample.labels == {
        "path": "C:\\temp\\x",
        "quote": 'say "hi"',
        "multi": "a\nb",
        "comma": "a,b}c= d",
    }
    assert sample.value == 3.0
    assert sample.timestamp == 1700000000.0  # written in milliseconds, read in seconds


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


def test_histogram_and_summary_without_help(edge: Scrape) -> None:
    (hist,) = edge.histograms("latency_seconds")
    assert hist.buckets == ((0.1, 2.0), (0.5, 6.0), (1.0, 9.0), (math.inf, 10.0))
    assert hist.quantile(0.5) == pytest.approx(0.1 + 0.4 * (5 - 2) / (6 - 2))
    assert hist.quantile(0.0) == 0.0
    assert hist.quantile(0.95) == 1.0  # in the +Inf bucket: the largest finite bound
    assert edge.families["rpc_seconds"].type == "summary"
    assert edge.value("rpc_seconds", quantile="0.99") == 0.9


def test_quoted_names_untyped_and_split_families(edge: Scrape) -> None:
    assert edge.value("my.dotted.metric") == 1.0
    assert edge.samples("my.dotted.metric")[0].labels == {"label.with.dots": "v"}
    family = edge.families["no_type_or_help"]
    assert family.type == "unknown"
    # its two samples are not adjacent: the library yields two families, merged here
    assert [s.labels["shard"] for s in family.samples] == ["a", "b"]
    assert edge.total("no_type_or_help") == 11.0


def test_text_format_counter_without_total_is_renamed_by_the_library(edge: Scrape) -> None:
    assert edge.families["legacy_counter"].type == "counter"
    assert edge.value("legacy_counter_total") == 7.0
    assert "legacy_counter" not in edge


def test_openmetrics_family_names_own_their_suffixes(openmetrics: Scrape) -> None:
    family = openmetrics.families["om_requests"]
    assert family.type == "counter"
    assert family.help == "Requests served."
    assert [s.name for s in family.samples] == ["om_requests_total", "om_requests_created"]
    assert openmetrics.value("om_requests_total", code="200") == 10.0  # exemplar dropped
    assert openmetrics.samples("om_requests_total")[0].timestamp is None
    assert openmetrics.families["om_payload_bytes"].unit == "bytes"
    (hist,) = openmetrics.histograms("latency_seconds")  # an exemplar on a bucket, too
    assert hist.count == 10.0 and hist.buckets[0] == (0.1, 2.0)
    (dotted,) = openmetrics.samples("my.dotted.metric", **{"label.with.dots": "v"})
    assert (dotted.value, dotted.timestamp) == (1.0, 1700000000.5)
    assert openmetrics.families["my.dotted.metric"].type == "gauge"


def test_openmetrics_is_strict_after_eof() -> None:
    text = OPENMETRICS_EDGE.read_text()
    with pytest.raises(ParseError, match=r"^line 18: Received line after \# EOF: more 1$"):
        parse_exposition(text.replace("# EOF\n", "# EOF\nmore 1\n# EOF\n"))


def test_histogram_delta() -> None:
    before = Histogram("h", {}, ((1.0, 1.0), (math.inf, 2.0)), 2.0, 1.5)
    after = Histogram("h", {}, ((1.0, 4.0), (math.inf, 6.0)), 6.0, 5.5)
    window = after - before
    assert window.buckets == ((1.0, 3.0), (math.inf, 4.0))
    assert window.count == 4.0 and window.mean == 1.0
    with pytest.raises(ValueError, match="bucket bounds differ"):
        _ = after - Histogram("h", {}, ((2.0, 1.0), (math.inf, 2.0)), 2.0, 1.5)
    assert Histogram("h", {}, (), 0.0, 0.0).quantile(0.5) is None


def test_bucket_without_numeric_le() -> None:
    scrape = parse_exposition('# TYPE h histogram\nh_bucket{le="x"} 1\nh_count 1\nh_sum 1\n')
    with pytest.raises(ParseError, match="without a numeric le"):
        scrape.histograms("h")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('m{a="1"', "could not convert"),
        ("m abc", "could not convert string to float: 'abc'"),
        ("m 1_000", "Invalid value"),
        ("m{a=1} 1", "Invalid labels"),
        ('m{a="1",a="2"} 1', "Invalid labels"),
        ('m{1a="x"} 1', "Invalid labels"),
        ("# TYPE m sometype", "Invalid metric type: sometype"),
        ("m1", "could not convert"),
        ('{a="b"} 1', "malformed line"),
    ],
)
def test_malformed_lines_name_their_line(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as caught:
        parse_exposition(f"# HELP ok fine\nok 1\n{text}\n")
    assert caught.value.message.startswith("line 3:")


@pytest.mark.parametrize(
    ("line", "name", "labels", "value"),
    [
        ("m 1 2 3", "m", {}, 1.0),  # fields after the timestamp: ignored
        ('m{a="x\\q"} 1', "m", {"a": "x\\q"}, 1.0),  # an unknown escape stays verbatim
    ],
)
def test_lenient_text_format_lines_the_library_accepts(
    line: str, name: str, labels: dict[str, str], value: float
) -> None:
    (sample,) = parse_exposition(line + "\n").samples(name)
    assert (dict(sample.labels), sample.value) == (labels, value)


def test_type_after_samples_is_rejected() -> None:
    with pytest.raises(ParseError, match="after its samples"):
        parse_exposition("m 1\n# TYPE m counter\n")


def test_crlf_and_blank_lines() -> None:
    scrape = parse_exposition('# TYPE a gauge\r\n\r\na 1\r\n  \nb{x="y"}\t2\n')
    assert scrape.value("a") == 1.0
    assert scrape.value("b", x="y") == 2.0


def test_empty_scrape() -> None:
    assert parse_exposition("").sample_names() == []


_label_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_label_values = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)


@given(st.dictionaries(_label_names, _label_values, max_size=4), st.floats(allow_nan=False))
def test_what_prometheus_client_writes_reads_back(labels: dict[str, str], value: float) -> None:
    """What vLLM serves is ``prometheus_client.generate_latest``: any label value round-trips."""
    registry = CollectorRegistry()
    gauge = Gauge("metric", "A gauge.", sorted(labels), registry=registry)
    (gauge.labels(**labels) if labels else gauge).set(value)
    scrape = parse_exposition(generate_latest(registry).decode())
    (sample,) = scrape.samples("metric")
    assert dict(sample.labels) == labels
    assert sample.value == value


@pytest.mark.parametrize("bad", ["NaN", "+Inf"])
def test_count_is_a_whole_number_and_refuses_what_is_not_a_count(real: Scrape, bad: str) -> None:
    assert real.count("vllm:spec_decode_num_accepted_tokens_per_pos_total") == 592
    assert real.count("vllm:spec_decode_num_drafts_total", model_name="tiny") == 164
    assert real.count("vllm:not_there") is None
    broken = parse_exposition(
        f'# TYPE x_total counter\nx_total{{a="1"}} 3\nx_total{{a="2"}} {bad}\n'
    )
    with pytest.raises(ParseError, match=r"counter x_total reads .*not a count"):
        broken.count("x_total")
    assert broken.count("x_total", a="1") == 3
