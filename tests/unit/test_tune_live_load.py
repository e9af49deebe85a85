"""``tune NAME --load``'s loop over injected launch/measure steps (the CPU-like machine of
``test_tune_load``), what it serves at the end, and the playbook edits it writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.errors import TuneInputError
from dflashops.playbook.load import load_playbook
from dflashops.tune.live_load import (
    VLLM_DEFAULT_MAX_NUM_SEQS,
    LoadTuneOutcome,
    Served,
    max_num_seqs,
    run_load_tune,
    served_playbook,
    set_speculative_schedule,
)
from dflashops.tune.load_plan import LoadTunePlan
from dflashops.tune.load_runs import LevelRun
from dflashops.tune.load_settings import LoadSettings
from tests.unit.test_tune_load import CPU_CURVE, LEVELS, bench, cpu_step

OLD_K = 8
REFERENCE_PLAYBOOK = Path(__file__).parents[2] / "playbooks" / "qwen3.6-27b-dflash.yaml"


class FakeServer:
    """Records every launch; each bench is the CPU machine at what is served, a schedule's
    levels at their scheduled k less ``losses[level]``."""

    def __init__(self, losses: dict[int, float] | None = None) -> None:
        self.losses = losses or {}
        self.launched: list[Served] = []

    def launch(self, served: Served) -> None:
        self.launched.append(served)

    def measure(self, served: Served) -> list[LevelRun]:
        assert served == self.launched[-1], "a bench measures what was launched last"
        if isinstance(served, int):
            return bench(cpu_step, CPU_CURVE, served)
        runs = []
        for level in LEVELS:
            k = next(entry[2] for entry in served if entry[0] <= level <= entry[1])
            tokens = CPU_CURVE.tokens_per_step(k)
            tok_s = level * tokens / cpu_step(level, k) * (1.0 - self.losses.get(level, 0.0))
            runs.append(LevelRun(level=level, k=max(e[2] for e in served), output_tok_s=tok_s))
        return runs


def tune(server: FakeServer, version: str = "0.32.0", budget: int = 4) -> LoadTuneOutcome:
    plan = LoadTunePlan(
        settings=LoadSettings(levels=LEVELS, tolerance=0), budget=budget, current_k=OLD_K
    )
    said: list[str] = []
    outcome = run_load_tune(
        plan,
        server.launch,
        server.measure,
        said.append,
        engine="vllm",
        version=version,
        max_num_seqs=64,
    )
    assert said[-1] == outcome.sentence
    return outcome


def test_a_verified_schedule_is_kept_and_left_serving() -> None:
    server = FakeServer({8: 0.02})
    outcome = tune(server)
    schedule = outcome.decision.schedule.as_vllm()
    # the plan's four probes, then the schedule once; it stays up: nothing relaunched after it
    assert server.launched == [OLD_K, 0, 1, 3, schedule]
    assert outcome.launches == server.launched
    assert outcome.verdict is not None and outcome.verdict.accepted
    assert outcome.kept_schedule == schedule and outcome.kept_k == max(e[2] for e in schedule)
    assert schedule[0][:2] == [1, 1] and schedule[-1][1] == 64
    assert len(outcome.verify_runs) == len(LEVELS)
    verdict = outcome.section()["verdict"]
    assert isinstance(verdict, dict) and verdict["accepted"] is True


def test_a_refused_schedule_leaves_the_single_k_serving() -> None:
    server = FakeServer({8: 0.30})
    outcome = tune(server)
    assert outcome.verdict is not None and not outcome.verdict.accepted
    assert outcome.kept_schedule is None and outcome.kept_k == 1
    # the refused schedule is not what keeps running: the single k is launched after it
    assert isinstance(server.launched[-2], list) and server.launched[-1] == 1
    assert outcome.sentence.startswith("schedule refused: at c=8")


def test_an_engine_without_the_schedule_serves_the_mix_best_k_unverified() -> None:
    server = FakeServer()
    outcome = tune(server, version="0.23.0")
    assert outcome.decision.kind == "single_k" and outcome.verdict is None
    assert not any(isinstance(served, list) for served in server.launched)
    assert server.launched[-1] == outcome.kept_k == 1
    assert "0.23.0" in outcome.sentence and "one k for every batch size instead" in outcome.sentence


def test_the_last_probe_already_serving_the_kept_k_is_not_relaunched() -> None:
    server = FakeServer()
    outcome = tune(server, version="0.23.0", budget=3)
    assert outcome.kept_k == 1 and server.launched == [OLD_K, 0, 1]


def test_speculation_off_winning_leaves_the_playbook_k_serving_and_says_so() -> None:
    # two probes only (k=8 and off): off wins the mix, but the playbook keeps its drafter, so the
    # server goes back to what the playbook says rather than staying on the off probe
    server = FakeServer()
    outcome = tune(server, version="0.23.0", budget=2)
    assert outcome.decision.kind == "off" and outcome.kept_k == 0
    assert server.launched == [OLD_K, 0, OLD_K]
    assert "speculation off maximises aggregate output tok/s" in outcome.sentence


# --- the served playbook and the playbook text --------------------------------------------------


def test_served_playbook_turns_speculation_off_sets_k_or_serves_a_schedule() -> None:
    book = load_playbook(REFERENCE_PLAYBOOK)
    off = served_playbook(book, 0)
    assert off.drafter.method == "none" and off.drafter.model is None
    assert off.server.num_speculative_tokens is None
    three = served_playbook(book, 3)
    assert three.server.num_speculative_tokens == 3 and three.drafter == book.drafter
    assert three.server.speculative_schedule is None
    scheduled = served_playbook(book, [[1, 4, 5], [5, 256, 2]])
    assert scheduled.server.num_speculative_tokens == 5
    assert scheduled.server.speculative_schedule == [(1, 4, 5), (5, 256, 2)]
    assert book.server.num_speculative_tokens == 6, "the playbook itself is not changed"


def test_max_num_seqs_reads_either_spelling_else_vllm_default() -> None:
    book = load_playbook(REFERENCE_PLAYBOOK)
    assert max_num_seqs(book) == VLLM_DEFAULT_MAX_NUM_SEQS
    for args in (["--max-num-seqs", "48"], ["--max-num-seqs=48"]):
        server = book.server.model_copy(update={"extra_args": args})
        assert max_num_seqs(book.model_copy(update={"server": server})) == 48


def test_the_schedule_is_written_next_to_k_with_comments_kept_and_rerun_replaces_it() -> None:
    text = REFERENCE_PLAYBOOK.read_text(encoding="utf-8")
    once = set_speculative_schedule(text, 5, [[1, 4, 5], [5, 256, 2]], "# tune --load X: first")
    assert "  num_speculative_tokens: 5\n" in once
    assert "  # tune --load X: first\n  speculative_schedule: [[1, 4, 5], [5, 256, 2]]\n" in once
    assert "# port 30000, num_speculative_tokens cut from 15 to 6" in once  # the header stays
    parsed = yaml.safe_load(once)["server"]
    assert parsed["speculative_schedule"] == [[1, 4, 5], [5, 256, 2]]
    # the rerun replaces the schedule and the comment, it does not stack them
    twice = set_speculative_schedule(once, 2, None, "# tune --load Y: refused")
    assert twice.count("# tune --load") == 1 and "speculative_schedule" not in twice
    assert "  num_speculative_tokens: 2\n" in twice
    assert (
        twice.replace("  # tune --load Y: refused\n", "").replace(
            "num_speculative_tokens: 2\n", "num_speculative_tokens: 6\n"
        )
        == text
    )
    load_playbook_text_is_valid(twice)


def test_a_block_style_schedule_written_by_hand_is_replaced_whole() -> None:
    text = REFERENCE_PLAYBOOK.read_text(encoding="utf-8").replace(
        "  num_speculative_tokens: 6\n",
        "  num_speculative_tokens: 6\n"
        "  speculative_schedule:\n    - [1, 8, 6]\n    - [9, 256, 1]\n",
    )
    out = set_speculative_schedule(text, 4, [[1, 2, 4], [3, 256, 1]], "# tune --load Z: kept")
    assert "- [1, 8, 6]" not in out and "- [9, 256, 1]" not in out
    assert yaml.safe_load(out)["server"]["speculative_schedule"] == [[1, 2, 4], [3, 256, 1]]


def test_a_playbook_without_a_k_line_is_refused() -> None:
    with pytest.raises(TuneInputError, match="num_speculative_tokens"):
        set_speculative_schedule("server:\n  port: 1\n", 3, None, "# tune --load: x")


def load_playbook_text_is_valid(text: str) -> None:
    data = yaml.safe_load(text)
    assert data["server"]["num_speculative_tokens"] >= 1


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [("1,x", "concurrency levels such as 1,4,16"), ("0,4", "concurrency levels are 1 or more")],
)
def test_bad_levels_are_a_usage_error(value: str, message: str) -> None:
    result = CliRunner().invoke(cli, ["tune", "any", "--load", value])
    assert result.exit_code == 2
    assert message in result.output


def test_help_teaches_load_and_the_tpot_slo() -> None:
    result = CliRunner().invoke(cli, ["tune", "--help"])
    assert result.exit_code == 0
    assert "--load" in result.output and "batch-size" in result.output
    assert "--tpot-slo-ms" in result.output
