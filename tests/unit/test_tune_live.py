"""The live tune loop over an injected fake server, the playbook's k line edit, the live request,
and what ``live_tune`` refuses before its first launch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
from pydantic import ValidationError

from dflashops.errors import TuneInputError
from dflashops.inventory.load import Inventory
from dflashops.playbook.load import load_playbook
from dflashops.pydantic_errors import first_error_line
from dflashops.tune import TunePlan, TuneRun, TuneSettings
from dflashops.tune.live import (
    k_line_change,
    live_tune,
    playbook_at_k,
    run_live_tune,
    set_num_speculative_tokens,
)
from dflashops.tune.request import LiveTuneRequest

REPO = Path(__file__).resolve().parents[2]
DECAY_BOOK = REPO / "playbooks" / "lab-decay.yaml"
# live_tune refuses these requests before it reads the inventory or connects anywhere
NO_INVENTORY = cast(Inventory, None)

DECAY = [0.78, 0.53, 0.43, 0.32, 0.22, 0.15, 0.10, 0.07]


@dataclass
class FakeServer:
    """Launch/bench as pure functions: a server that knows which k it runs."""

    rates: list[float]
    base_s: float = 0.020
    per_token_s: float = 0.004
    running: int | None = None
    launches: list[int] = field(default_factory=list)
    benches: list[int] = field(default_factory=list)

    def step_s(self, k: int) -> float:
        return self.base_s + self.per_token_s * k

    def true_tok_s(self, k: int) -> float:
        return (1 + sum(self.rates[:k])) / self.step_s(k)

    def launch(self, k: int) -> None:
        self.launches.append(k)
        self.running = k

    def measure(self, k: int) -> TuneRun:
        assert self.running == k, "benched a k that is not running"
        self.benches.append(k)
        return TuneRun(k=k, output_tok_s=self.true_tok_s(k), acceptance=tuple(self.rates[:k]))


def plan(budget: int = 3, current_k: int | None = 4, k_min: int = 1, k_max: int = 6) -> TunePlan:
    return TunePlan(
        settings=TuneSettings(k_min=k_min, k_max=k_max), budget=budget, current_k=current_k
    )


def test_loop_spends_at_most_budget_plus_one_launch_and_verifies_k_star() -> None:
    server = FakeServer(DECAY)
    said: list[str] = []
    outcome = run_live_tune(plan(), server.launch, server.measure, said.append)
    assert len(outcome.runs) <= 3
    assert len(server.launches) <= 4
    assert server.launches[0] == 4  # the current k first
    assert server.running == outcome.best_k
    assert server.benches[-1] == outcome.best_k
    assert 1 <= outcome.best_k <= 6
    assert outcome.verify.k == outcome.best_k
    assert outcome.measured_tok_s == pytest.approx(server.true_tok_s(outcome.best_k))
    assert outcome.start_tok_s == pytest.approx(server.true_tok_s(4))
    assert outcome.gain == pytest.approx(
        server.true_tok_s(outcome.best_k) / server.true_tok_s(4) - 1
    )
    assert any(line.startswith("probe k=4") for line in said)


def test_noiseless_server_predicts_what_it_measures() -> None:
    server = FakeServer(DECAY)
    outcome = run_live_tune(plan(budget=4), server.launch, server.measure)
    # a linear step time and exact acceptance: the model is the truth
    assert outcome.predicted_tok_s == pytest.approx(outcome.measured_tok_s, rel=1e-6)
    best_true = max(range(1, 7), key=server.true_tok_s)
    assert outcome.best_k == best_true


def test_no_relaunch_when_k_star_was_the_last_launch() -> None:
    server = FakeServer(DECAY)
    outcome = run_live_tune(plan(budget=3), server.launch, server.measure)
    assert server.launches == [4, 1, 3]  # current, anchor, predicted optimum = k*
    assert server.benches == [4, 1, 3, 3]
    assert outcome.best_k == 3
    assert outcome.notes and "without a relaunch" in outcome.notes[0]


def test_relaunch_when_budget_ends_before_k_star() -> None:
    server = FakeServer(DECAY)
    outcome = run_live_tune(plan(budget=2, current_k=6), server.launch, server.measure)
    assert server.launches == [6, 1, 3]
    assert server.benches == [6, 1, 3]
    assert outcome.best_k == 3 and not outcome.notes


def test_section_is_json_ready() -> None:
    server = FakeServer(DECAY)
    section = run_live_tune(plan(), server.launch, server.measure).section()
    data = json.loads(json.dumps(section))
    assert data["mode"] == "live"
    assert data["predicted_tok_s"] > 0 and data["measured_tok_s"] > 0
    assert data["launches"][0] == 4 and len(data["runs"]) == len(data["probes"])


PLAYBOOK = """\
server:
  port: 30000
  num_speculative_tokens: 4   # the drafter's trained depth
  enforce_eager: true
tune: {k_min: 1, k_max: 8}
"""


def test_k_line_edit_keeps_comments_and_everything_else() -> None:
    updated = set_num_speculative_tokens(PLAYBOOK, 2)
    assert "  num_speculative_tokens: 2   # the drafter's trained depth\n" in updated
    assert updated.replace(": 2   #", ": 4   #") == PLAYBOOK
    assert k_line_change(PLAYBOOK, 2) == (
        "num_speculative_tokens: 4   # the drafter's trained depth",
        "num_speculative_tokens: 2   # the drafter's trained depth",
    )
    assert k_line_change(PLAYBOOK, 4) is None


@pytest.mark.parametrize("text", ["server: {port: 1}\n", PLAYBOOK + "num_speculative_tokens: 3\n"])
def test_k_line_edit_refuses_zero_or_several_lines(text: str) -> None:
    with pytest.raises(TuneInputError, match="expected one"):
        set_num_speculative_tokens(text, 2)


def test_a_probe_playbook_is_the_loaded_one_at_k() -> None:
    book = load_playbook(DECAY_BOOK)
    at_2 = playbook_at_k(book, 2)
    assert at_2 == load_playbook(DECAY_BOOK, ["server.num_speculative_tokens=2"])
    assert book.server.num_speculative_tokens == 4  # the loaded one is left as it was


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"k_min": 5, "k_max": 3}, "--k-min 5 is above --k-max 3"),
        ({"k_max": 65}, "k_max"),
        ({"budget": 1}, "budget"),
        ({"container": ""}, "container"),
        ({"requests": 0}, "requests"),
        ({"k_mim": 2}, "unknown key"),
    ],
)
def test_live_request_refuses_what_cannot_run(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LiveTuneRequest.model_validate({"container": "lab-ct1", **fields})
    assert message in first_error_line(caught.value)


def test_live_request_takes_the_playbooks_defaults() -> None:
    request = LiveTuneRequest(container="lab-ct1")
    assert (request.k_min, request.k_max, request.budget, request.requests) == (None,) * 4
    assert request.write_playbook and request.probe_dir is None


def test_a_playbook_without_speculation_is_refused_before_any_launch(tmp_path: Path) -> None:
    book = tmp_path / "plain.yaml"
    text = DECAY_BOOK.read_text(encoding="utf-8")
    plain = text.replace("  method: draft_model", "  method: none").replace(
        "  num_speculative_tokens: 4\n", ""
    )
    plain = plain.replace(
        "  model:\n    path: /opt/lab/models/tiny-qwen3-draft-decay\n    source: mount\n", ""
    )
    book.write_text(plain, encoding="utf-8")
    request = LiveTuneRequest(container="lab-ct1", playbook=str(book))
    with pytest.raises(TuneInputError, match="without speculative decoding"):
        live_tune(NO_INVENTORY, request)


def test_a_playbook_whose_k_line_cannot_be_edited_is_refused_before_any_launch(
    tmp_path: Path,
) -> None:
    book = tmp_path / "flow.yaml"
    text = DECAY_BOOK.read_text(encoding="utf-8")
    # the same playbook, its k in a flow mapping: valid, but no `num_speculative_tokens: N` line
    data = load_playbook(DECAY_BOOK).model_dump(mode="json")
    book.write_text(json.dumps(data), encoding="utf-8")
    assert "num_speculative_tokens: 4" in text and load_playbook(book) == load_playbook(DECAY_BOOK)
    request = LiveTuneRequest(container="lab-ct1", playbook=str(book))
    with pytest.raises(TuneInputError, match="expected one `num_speculative_tokens: N` line"):
        live_tune(NO_INVENTORY, request)


def test_a_range_outside_the_playbooks_is_a_tune_input_error() -> None:
    # lab-decay's tune section says k_max 6: --k-min 8 alone cannot fit it
    request = LiveTuneRequest(container="lab-ct1", playbook=str(DECAY_BOOK), k_min=8)
    with pytest.raises(TuneInputError, match="k_min 8 is above k_max 6") as caught:
        live_tune(NO_INVENTORY, request)
    assert caught.value.hint == "give both --k-min and --k-max"
