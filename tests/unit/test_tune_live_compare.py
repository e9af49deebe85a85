"""``compare``'s per-method playbooks and loop over injected launch/bench, and the CLI's usage."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.bench.models import BenchReport
from dflashops.cli import cli
from dflashops.errors import TuneInputError
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from dflashops.tune.compare import Skipped, parse_methods, playbook_for_method, run_compare
from tests.support.reports import bench_report, level_result

REPO = Path(__file__).resolve().parents[2]
DECAY_BOOK = REPO / "playbooks" / "lab-decay.yaml"
RATES = {"draft_model": [0.78, 0.53, 0.43, 0.32], "ngram": [0.4, 0.2, 0.1, 0.05]}


def fake_report(book: Playbook, method: str) -> BenchReport:
    k = book.server.num_speculative_tokens
    rates = RATES.get(method)
    length = 1 + sum(rates) if rates else None
    level = level_result(
        output_throughput=40.0 * (length or 1.0),
        total_token_throughput=140.0,
        mean_tpot_ms=25.0 / (length or 1.0),
        spec_decode_acceptance_length=length,
        spec_decode_per_position_acceptance_rates=rates,
    )
    return bench_report(
        [level],
        workload={"max_tokens": 128},
        container="lab-ct1",
        method=book.drafter.method,
        num_speculative_tokens=k,
    )


def test_each_method_becomes_a_playbook_that_validates() -> None:
    book = load_playbook(DECAY_BOOK)
    assert playbook_for_method(book, "draft_model") is book
    for method in ("none", "ngram"):
        changed = playbook_for_method(book, method)
        assert isinstance(changed, Playbook)
        assert changed.drafter.method == method and changed.drafter.model is None
        assert changed.server.num_speculative_tokens == (None if method == "none" else 4)
        # the same change through the file and --set: the copy is what the loader would make
        overrides = [f"drafter.method={method}", "drafter.model=null"]
        overrides.append(f"server.num_speculative_tokens={'null' if method == 'none' else 4}")
        assert changed == load_playbook(DECAY_BOOK, overrides)
    for method in ("dflash", "eagle3", "mtp"):
        skipped = playbook_for_method(book, method)
        assert isinstance(skipped, Skipped) and "draft_model" in skipped.reason


def test_compare_loop_launches_each_expressible_method_once() -> None:
    book = load_playbook(DECAY_BOOK)
    launched: list[str] = []

    def launch(at: Playbook) -> None:
        launched.append(at.drafter.method)

    outcome = run_compare(book, parse_methods("none,dflash,ngram,draft_model"), launch, fake_report)
    assert launched == ["none", "ngram", "draft_model"]
    assert [row.method for row in outcome.rows] == launched
    assert [item.method for item in outcome.skipped] == ["dflash"]
    none, ngram, draft = outcome.rows
    assert none.k is None and none.acceptance_length is None
    assert draft.k == 4 and draft.per_position_acceptance == (0.78, 0.53, 0.43, 0.32)
    assert draft.output_tok_s > ngram.output_tok_s > none.output_tok_s
    section = outcome.section()
    assert set(section["levels"]) == {"none", "ngram", "draft_model"}


def test_unknown_method_is_refused() -> None:
    with pytest.raises(TuneInputError, match="unknown method 'medusa'"):
        parse_methods("none,medusa")
    result = CliRunner().invoke(cli, ["compare", "lab-ct1", "--methods", "bogus"])
    assert result.exit_code == 2 and "unknown method" in result.output


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("tune", ["lab-ct1", "--acceptance", "0.5"], "--acceptance is for offline tuning"),
        (
            "tune-offline",
            ["--acceptance", "0.5", "--step-cost", "1:0.02,2:0.03", "--dry-run"],
            "--dry-run is for live tuning: `dflashops tune NAME --dry-run …`",
        ),
        ("tune-offline", ["--acceptance", "0.5", "--budget", "3"], "--budget is for live tuning"),
    ],
)
def test_live_and_offline_options_do_not_mix(command: str, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, [command, *args])
    assert result.exit_code == 2
    assert message in result.output
