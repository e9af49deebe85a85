"""A ``/metrics`` scrape, read by ``prometheus_client``'s own parsers, and the look-ups dflashops
needs on top (samples by name and labels, sums over engines, histograms and their quantiles).

vLLM and SGLang expose their metrics with ``prometheus_client``, so its parsers are the reference
for what they write. A document whose last line is ``# EOF`` is OpenMetrics 1.0 and goes to
``prometheus_client.openmetrics.parser``; anything else is the Prometheus text format 0.0.4 (what
both servers answer a plain scrape with) and goes to ``prometheus_client.parser``. Families carry
the library's OpenMetrics names: the counter exposed as ``foo_total`` is family ``foo``, an
untyped family is ``unknown``; timestamps are in seconds. Sample names stay as exposed
(``foo_total``, ``foo_bucket``).

The libraries handle label escapes (``\\\\``, ``\\"``, ``\\n``; commas, braces and spaces inside
quotes are data), ``# HELP`` escapes, quoted UTF-8 metric and label names
(``{"my.metric", "a.b"="x"}``), a trailing comma in a label set, ``NaN`` / ``+Inf`` / ``-Inf``,
timestamps, histograms and summaries; the OpenMetrics parser also ``# UNIT``, exemplars (parsed,
then dropped here), ``_created`` samples inside their family, and ``# EOF``.

What they do not handle, and what this module does about it:

- Line numbers: the libraries raise ``ValueError`` without one. The reader's position at the
  error tells the line being read, and ``ParseError`` names it. A problem found only when a
  family ends (an unknown ``# TYPE``, OpenMetrics histogram checks) names the line after it.
- A ``# TYPE`` after its family's samples: the 0.0.4 parser starts a second family of that name.
  Families that share a name are merged here when their types agree (samples of one family that
  are not adjacent); when they differ it is a ``ParseError``.
- Lenient 0.0.4 reading, kept as the library does it: an unknown escape in a label value
  (``\\q``) stays verbatim; fields after the timestamp are ignored; an exemplar (not part of
  0.0.4) keeps the value right but its last field is read as the timestamp; ``# UNIT`` lines and
  a ``# EOF`` that is not the last line are comments; a counter family typed without ``_total``
  has its samples renamed ``<name>_total``.
- OpenMetrics is strict: lines after ``# EOF``, blank lines and free comments are errors.
- Native histograms (experimental OpenMetrics) are refused: nothing here reads them.

A malformed document raises ``ParseError``: a scrape that does not parse is never half-read.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_fd_to_metric_families
from prometheus_client.samples import Sample as LibrarySample

from dflashops.errors import ParseError

Parser = Callable[[TextIO], Iterable[Metric]]
# The OpenMetrics parser carries no annotations; this gives it the 0.0.4 parser's signature.
_parse_openmetrics: Parser = openmetrics_parser.text_fd_to_metric_families
_parse_text_format: Parser = text_fd_to_metric_families


@dataclass(frozen=True)
class Sample:
    """One line of a scrape: ``name{labels} value [timestamp]`` (timestamp in seconds)."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None

    def matches(self, wanted: Mapping[str, str]) -> bool:
        """True when every wanted label is present with that exact value."""
        return all(self.labels.get(key) == value for key, value in wanted.items())


@dataclass
class MetricFamily:
    """The samples of one metric family, as the library groups and names them."""

    name: str
    type: str
    help: str = ""
    unit: str = ""
    samples: list[Sample] = field(default_factory=list)


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

    def count(self, name: str, **labels: str) -> int | None:
        """:meth:`total` of a counter as a whole number; a NaN or infinite one is a
        ``ParseError`` (a count that is not one must never become a rate)."""
        total = self.total(name, **labels)
        if total is None:
            return None
        if not math.isfinite(total):
            raise ParseError(f"counter {name} reads {total}, not a count")
        return round(total)

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
            group(sample).buckets.append((_bucket_bound(name, sample), sample.value))
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


def _bucket_bound(name: str, sample: Sample) -> float:
    try:
        return float(sample.labels["le"])
    except (KeyError, ValueError):
        raise ParseError(f"{name}_bucket: a bucket without a numeric le label") from None


def parse_exposition(text: str) -> Scrape:
    """Parse one scrape; raises ``ParseError`` (naming the line) on malformed input."""
    parse = _parse_openmetrics if _is_openmetrics(text) else _parse_text_format
    # StringIO splits on "\n" only, as both parsers expect (a label value may hold "\r" or
    # another Unicode line separator), and its position tells which line the parser is on
    reader = io.StringIO(text)
    families: dict[str, MetricFamily] = {}
    try:
        for metric in parse(reader):
            _merge(families, metric)
    except ValueError as exc:  # the libraries' one error type for a malformed document
        lineno, line = _line_ending_at(text, reader.tell())
        problem = str(exc) or "malformed line"
        # the libraries quote the line in some messages, not in others
        shown = problem if line in problem else f"{problem}: {line}"
        raise ParseError(f"line {lineno}: {shown}") from None
    return Scrape(families)


def _is_openmetrics(text: str) -> bool:
    # OpenMetrics requires "# EOF" as the last line; the 0.0.4 format has no such marker
    return text.rstrip().rpartition("\n")[2].strip() == "# EOF"


def _merge(families: dict[str, MetricFamily], metric: Metric) -> None:
    samples = [_sample(metric.name, raw) for raw in metric.samples]
    family = families.get(metric.name)
    if family is None:
        families[metric.name] = MetricFamily(
            metric.name, metric.type, metric.documentation, metric.unit, samples
        )
        return
    if family.type != metric.type:
        raise ValueError(
            f"family {metric.name} is both {family.type} and {metric.type} "
            "(a # TYPE after its samples?)"
        )
    family.samples.extend(samples)
    family.help = family.help or metric.documentation
    family.unit = family.unit or metric.unit


def _sample(family: str, raw: LibrarySample) -> Sample:
    if raw.native_histogram is not None:
        raise ValueError(f"{family}: native histograms are not supported")
    timestamp = None if raw.timestamp is None else float(raw.timestamp)
    return Sample(raw.name, raw.labels, float(raw.value), timestamp)


def _line_ending_at(text: str, end: int, width: int = 80) -> tuple[int, str]:
    """The number and (shortened) text of the line that ends at ``end``: the last one read."""
    start = text.rfind("\n", 0, max(end - 1, 0)) + 1
    line = text[start:end].strip()
    if len(line) > width:
        line = line[: width - 1] + "…"
    return text.count("\n", 0, start) + 1, line
