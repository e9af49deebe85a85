"""A parser for the Prometheus text exposition format (0.0.4), and the OpenMetrics forms that
``prometheus_client`` and vLLM/SGLang servers emit.

Handled: ``# HELP`` (with its ``\\\\`` and ``\\n`` escapes), ``# TYPE``, ``# UNIT``, ``# EOF``,
other comments; label values with ``\\\\``, ``\\"`` and ``\\n`` escapes (commas, braces and spaces
inside quotes are data); quoted UTF-8 metric and label names (``{"my.metric", "a.b"="x"}``); a
trailing comma in a label set; ``NaN``, ``+Inf``, ``-Inf``; optional timestamps; OpenMetrics
exemplars (ignored); histograms and summaries (``_bucket``, ``_count``, ``_sum``), ``_total``
and ``_created`` samples, whether the ``# TYPE`` line names the family (OpenMetrics) or the
sample itself (``prometheus_client``'s classic output types ``foo_total`` and ``foo_created``).

A malformed line raises ``ParseError`` naming the line: a scrape that does not parse is never
silently half-read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from dflashops.errors import ParseError

METRIC_TYPES = frozenset(
    {"counter", "gauge", "histogram", "gaugehistogram", "summary", "untyped", "unknown", "info"}
    | {"stateset"}
)

# The sample-name suffixes a family of each type may use on top of its own name.
_TYPE_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("_count", "_sum", "_created"),
    "info": ("_info",),
}

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Go's strconv.ParseFloat, as Prometheus uses it, minus hex floats and underscores.
_FLOAT = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?i:inf(?:inity)?))|(?i:nan)",
)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One line of a scrape: ``name{labels} value [timestamp]``."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None

    def matches(self, wanted: Mapping[str, str]) -> bool:
        """True when every wanted label is present with that exact value."""
        return all(self.labels.get(key) == value for key, value in wanted.items())


@dataclass
class MetricFamily:
    """The samples that share one ``# TYPE`` (``untyped`` when the scrape never declared it)."""

    name: str
    type: str = "untyped"
    help: str | None = None
    unit: str | None = None
    samples: list[Sample] = field(default_factory=list)

    def owns(self, sample_name: str) -> bool:
        """Whether a sample of this name belongs to this family."""
        if sample_name == self.name:
            return True
        suffix = sample_name[len(self.name) :]
        return sample_name.startswith(self.name) and suffix in _TYPE_SUFFIXES.get(self.type, ())


@dataclass(frozen=True)
class Histogram:
    """One labelled series of a histogram: cumulative buckets ``(upper_bound, count)``."""

    name: str
    labels: Mapping[str, str]
    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """Prometheus ``histogram_quantile``: linear interpolation inside the bucket.

        None when the histogram is empty. A quantile in the ``+Inf`` bucket answers the largest
        finite bound, as Prometheus does.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        if not self.buckets or self.buckets[-1][1] <= 0:
            return None
        total = self.buckets[-1][1]
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for upper_bound, count in self.buckets:
            if count >= rank:
                if math.isinf(upper_bound):
                    return lower_bound
                if count == lower_count:
                    return upper_bound
                return lower_bound + (upper_bound - lower_bound) * (rank - lower_count) / (
                    count - lower_count
                )
            lower_bound, lower_count = upper_bound, count
        return lower_bound

    def __sub__(self, before: Histogram) -> Histogram:
        """What was observed between two scrapes of the same series."""
        if [b for b, _ in self.buckets] != [b for b, _ in before.buckets]:
            raise ValueError(f"{self.name}: bucket bounds differ between scrapes")
        return Histogram(
            name=self.name,
            labels=self.labels,
            buckets=tuple(
                (bound, after - prior)
                for (bound, after), (_, prior) in zip(self.buckets, before.buckets, strict=True)
            ),
            count=self.count - before.count,
            sum=self.sum - before.sum,
        )


class Scrape:
    """A parsed exposition: families in document order, and look-ups by sample name."""

    def __init__(self, families: Mapping[str, MetricFamily]) -> None:
        self.families: dict[str, MetricFamily] = dict(families)
        self._by_name: dict[str, list[Sample]] = {}
        for family in self.families.values():
            for sample in family.samples:
                self._by_name.setdefault(sample.name, []).append(sample)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return parse_exposition(text)

    def __contains__(self, sample_name: object) -> bool:
        return sample_name in self._by_name

    def __iter__(self) -> Iterator[Sample]:
        for samples in self._by_name.values():
            yield from samples

    def sample_names(self) -> list[str]:
        return list(self._by_name)

    def samples(self, name: str, **labels: str) -> list[Sample]:
        """Samples with exactly this name whose labels include ``labels``."""
        return [s for s in self._by_name.get(name, ()) if s.matches(labels)]

    def total(self, name: str, **labels: str) -> float | None:
        """The sum over matching samples (e.g. over engines), None when there is none."""
        found = self.samples(name, **labels)
        return math.fsum(s.value for s in found) if found else None

    def value(self, name: str, **labels: str) -> float | None:
        """The one matching sample's value; None if absent; ParseError if ambiguous."""
        found = self.samples(name, **labels)
        if len(found) > 1:
            raise ParseError(
                f"{name}: {len(found)} series match {labels or '{}'}; name more labels"
            )
        return found[0].value if found else None

    def histograms(self, name: str, **labels: str) -> list[Histogram]:
        """Every labelled series of histogram ``name`` (the family name, without ``_bucket``)."""
        groups: dict[tuple[tuple[str, str], ...], _HistogramParts] = {}

        def group(sample: Sample) -> _HistogramParts:
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            return groups.setdefault(key, _HistogramParts(dict(key)))

        for sample in self.samples(f"{name}_bucket", **labels):
            bound = sample.labels.get("le")
            if bound is None or not _FLOAT.fullmatch(bound):
                raise ParseError(f"{name}_bucket: a bucket without a numeric le label")
            group(sample).buckets.append((float(bound), sample.value))
        for sample in self.samples(f"{name}_count", **labels):
            group(sample).count = sample.value
        for sample in self.samples(f"{name}_sum", **labels):
            group(sample).sum = sample.value
        return [parts.build(name) for parts in groups.values()]


@dataclass
class _HistogramParts:
    labels: dict[str, str]
    buckets: list[tuple[float, float]] = field(default_factory=list)
    count: float | None = None
    sum: float = math.nan

    def build(self, name: str) -> Histogram:
        buckets = tuple(sorted(self.buckets))
        count = self.count if self.count is not None else (buckets[-1][1] if buckets else 0.0)
        return Histogram(name, self.labels, buckets, count, self.sum)


def parse_exposition(text: str) -> Scrape:
    """Parse one scrape; raises ``ParseError`` with the line number on malformed input."""
    families: dict[str, MetricFamily] = {}
    # Lines are split on "\n" only: a label value may hold other Unicode line separators.
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r").strip()
        if not line:
            continue
        try:
            if line.startswith("#"):
                if _comment(line, families):
                    break  # "# EOF"
                continue
            sample = _sample(line)
        except ParseError as exc:
            raise ParseError(f"line {lineno}: {exc.message}: {_excerpt(raw)}") from None
        _family_for(sample.name, families).samples.append(sample)
    return Scrape(families)


def _excerpt(line: str, width: int = 80) -> str:
    line = line.strip()
    return line if len(line) <= width else line[: width - 1] + "…"


def _comment(line: str, families: dict[str, MetricFamily]) -> bool:
    """Apply a ``#`` line; True on ``# EOF``."""
    parts = line[1:].strip().split(None, 2)
    if parts == ["EOF"]:
        return True
    if len(parts) < 2 or parts[0] not in ("HELP", "TYPE", "UNIT"):
        return False  # a free comment
    keyword, name = parts[0], parts[1]
    if not _NAME.fullmatch(name):
        raise ParseError(f"bad metric name {name!r} in # {keyword}")
    rest = parts[2] if len(parts) == 3 else ""
    family = families.setdefault(name, MetricFamily(name))
    if keyword == "HELP":
        family.help = _unescape_help(rest)
    elif keyword == "UNIT":
        family.unit = rest.strip()
    else:
        kind = rest.strip().lower()
        if kind not in METRIC_TYPES:
            raise ParseError(f"unknown metric type {rest.strip()!r}")
        if family.samples and family.type != kind:
            raise ParseError(f"# TYPE for {name} after its samples")
        family.type = kind
    return False


def _unescape_help(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            nxt = next(chars, "")
            out.append({"\\": "\\", "n": "\n"}.get(nxt, "\\" + nxt))
        else:
            out.append(char)
    return "".join(out)


def _family_for(sample_name: str, families: dict[str, MetricFamily]) -> MetricFamily:
    family = families.get(sample_name)
    if family is not None:
        return family
    for suffixes in _TYPE_SUFFIXES.values():
        for suffix in suffixes:
            if sample_name.endswith(suffix):
                base = families.get(sample_name[: -len(suffix)])
                if base is not None and base.owns(sample_name):
                    return base
    return families.setdefault(sample_name, MetricFamily(sample_name))


def _sample(line: str) -> Sample:
    name: str | None = None
    pos = 0
    match = _NAME.match(line)
    if match:
        name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    if line.startswith("{", pos):
        pos, quoted_name = _labels(line, pos + 1, labels)
        if quoted_name is not None:
            if name is not None:
                raise ParseError("metric name given twice")
            name = quoted_name
    if name is None:
        raise ParseError("expected a metric name")
    rest = line[pos:]
    if not rest[:1].isspace():
        raise ParseError("expected whitespace before the value")
    fields = rest.split()
    if "#" in fields:  # an OpenMetrics exemplar follows
        fields = fields[: fields.index("#")]
    if len(fields) not in (1, 2):
        raise ParseError("expected a value and an optional timestamp")
    value = _float(fields[0], "value")
    timestamp = _float(fields[1], "timestamp") if len(fields) == 2 else None
    return Sample(name, labels, value, timestamp)


def _float(token: str, what: str) -> float:
    if not _FLOAT.fullmatch(token):
        raise ParseError(f"bad {what} {token!r}")
    return float(token)


def _labels(line: str, pos: int, labels: dict[str, str]) -> tuple[int, str | None]:
    """Parse label pairs after ``{``; returns the position after ``}`` and a quoted metric name."""
    quoted_name: str | None = None
    while True:
        pos = _skip_space(line, pos)
        if line.startswith("}", pos):
            return pos + 1, quoted_name
        if line.startswith('"', pos):
            text, pos = _quoted(line, pos)
            pos = _skip_space(line, pos)
            if not line.startswith("=", pos):  # {"utf8.metric.name", ...}
                if quoted_name is not None or labels:
                    raise ParseError("a quoted metric name must come first in the braces")
                quoted_name = text
                pos = _after_pair(line, pos)
                continue
            label = text
        else:
            match = _LABEL_NAME.match(line, pos)
            if not match:
                raise ParseError(f"bad label name at column {pos + 1}")
            label, pos = match.group(), _skip_space(line, match.end())
        if not line.startswith("=", pos):
            raise ParseError(f"expected '=' after label {label}")
        pos = _skip_space(line, pos + 1)
        if not line.startswith('"', pos):
            raise ParseError(f"label {label}: value must be quoted")
        value, pos = _quoted(line, pos)
        if label in labels:
            raise ParseError(f"label {label} given twice")
        labels[label] = value
        pos = _after_pair(line, _skip_space(line, pos))


def _after_pair(line: str, pos: int) -> int:
    if line.startswith(",", pos):
        return pos + 1
    if line.startswith("}", pos):
        return pos
    raise ParseError(f"expected ',' or '}}' at column {pos + 1}")


def _skip_space(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _quoted(line: str, pos: int) -> tuple[str, int]:
    """Read a double-quoted, backslash-escaped string starting at ``line[pos] == '"'``."""
    out: list[str] = []
    i = pos + 1
    while i < len(line):
        char = line[i]
        if char == '"':
            return "".join(out), i + 1
        if char == "\\":
            if i + 1 >= len(line):
                break
            nxt = line[i + 1]
            if nxt not in _ESCAPES:
                raise ParseError(f"invalid escape \\{nxt} at column {i + 1}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(char)
        i += 1
    raise ParseError("unterminated quoted string")


def escape_label_value(value: str) -> str:
    """The inverse of label-value unescaping (for writing fixtures and test round trips)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
