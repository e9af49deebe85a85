"""The playbook's ``train:`` section: the lab's validates, defaults are an operator's, mistakes
name file:line:key, ``playbook show`` prints it, and ``--promote`` writes a new playbook beside
the given one with one line changed (never the given one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.errors import PlaybookError
from dflashops.playbook.load import load_playbook
from dflashops.training.promote import Promotion, is_bundled, promoted_path, write_promoted

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "playbooks" / "lab-dflash.yaml"
MINIMAL_TRAIN = "\ntrain:\n  dataset:\n    path: prompts.jsonl\n"


def _without_train(text: str) -> str:
    return text[: text.index("\ntrain:")] if "\ntrain:" in text else text


def _book(tmp_path: Path, train: str) -> Path:
    path = tmp_path / "book.yaml"
    path.write_text(_without_train(LAB.read_text()) + train)
    return path


def test_the_lab_playbook_trains_a_tiny_run() -> None:
    book = load_playbook(LAB)
    train = book.train
    assert train is not None
    assert train.dataset.source == "container" and train.dataset.path.startswith("/opt/lab/")
    assert train.data.max_samples is not None and train.data.max_samples <= 48
    assert train.steps.max_steps is not None and train.steps.max_steps <= 100
    assert train.drafter.layer_types == "sliding_attention"
    assert book.train_run_name == "lab-dflash"


def test_defaults_are_what_an_operator_expects(tmp_path: Path) -> None:
    book = load_playbook(_book(tmp_path, MINIMAL_TRAIN))
    train = book.train
    assert train is not None
    assert train.dataset.source == "local"
    assert (train.data.temperature, train.data.thinking, train.data.max_samples) == (0, None, None)
    assert (train.steps.epochs, train.steps.max_steps, train.steps.seed) == (1, None, 0)
    # every drafter key left out: filled from the registry or the target at plan time
    assert train.drafter.model_dump() == dict.fromkeys(
        ("num_layers", "block_size", "target_layer_ids", "mask_token_id", "layer_types")
    )
    assert book.train_run_name == book.name


@pytest.mark.parametrize(
    ("train", "key", "reason"),
    [
        (
            "\ntrain:\n  dataset:\n    path: data.jsonl\n    source: container\n",
            "train.dataset",
            "absolute path",
        ),
        (MINIMAL_TRAIN + "  steps:\n    max_step: 5\n", "train.steps.max_step", "unknown key"),
        (
            MINIMAL_TRAIN + "  drafter:\n    target_layer_ids: [2, 1]\n",
            "train.drafter.target_layer_ids",
            "strictly increasing",
        ),
        (MINIMAL_TRAIN + "  name: ../escape\n", "train.name", "pattern"),
        (MINIMAL_TRAIN + "  data:\n    concurrency: 0\n", "train.data.concurrency", "greater"),
    ],
)
def test_mistakes_name_file_line_and_key(tmp_path: Path, train: str, key: str, reason: str) -> None:
    path = _book(tmp_path, train)
    with pytest.raises(PlaybookError, match=reason) as caught:
        load_playbook(path)
    assert caught.value.key == key
    assert caught.value.source == str(path)
    train_line = path.read_text().splitlines().index("train:") + 1
    assert caught.value.line is not None and caught.value.line >= train_line
    assert caught.value.cli_exit_code == 2


def test_set_reaches_the_train_section() -> None:
    book = load_playbook(LAB, ["train.steps.max_steps=7", "train.data.thinking=true"])
    assert book.train is not None
    assert book.train.steps.max_steps == 7 and book.train.data.thinking is True
    with pytest.raises(PlaybookError, match=r"^--set:train\.steps\.lr"):
        load_playbook(LAB, ["train.steps.lr=-1"])


def test_playbook_show_prints_the_train_section() -> None:
    shown = CliRunner().invoke(cli, ["playbook", "show", str(LAB)])
    assert shown.exit_code == 0, shown.output
    body, _, note = shown.output.rstrip().rpartition("\n")
    data = yaml.safe_load(body)
    assert data["train"]["dataset"]["source"] == "container"
    assert data["train"]["drafter"]["block_size"] is None  # filled at plan time, and said so:
    assert note.startswith("# train: run name lab-dflash;") and "--dry-run" in note


def test_promote_writes_a_new_playbook_beside_the_given_one(tmp_path: Path) -> None:
    given = tmp_path / "lab.yaml"
    original = LAB.read_text()
    given.write_text(original)
    book = load_playbook(given)
    change = Promotion(drafter_dir="/var/lib/dflashops/training/r/promoted/1", block_size=5)

    path, promoted = write_promoted(given, book, change)

    assert path == tmp_path / "lab.trained.yaml"
    assert given.read_text() == original  # the given playbook is never rewritten
    assert promoted.drafter.model is not None
    assert str(promoted.drafter.model.path) == change.drafter_dir
    assert promoted.drafter.ref == book.drafter.ref  # no conflict: the reference stays
    new_lines = path.read_text().splitlines()
    body = [
        line for line in new_lines if not line.startswith("# Promoted") and "unchanged" not in line
    ]
    changed = [(a, b) for a, b in zip(original.splitlines(), body, strict=True) if a != b]
    assert len(changed) == 1 and change.drafter_dir in changed[0][1]  # comments kept


def test_promote_sets_the_reference_aside_when_the_drafter_differs(tmp_path: Path) -> None:
    given = tmp_path / "lab.yaml"
    given.write_text(LAB.read_text())
    book = load_playbook(given)
    change = Promotion(drafter_dir="/srv/d", block_size=3, ref_conflicts=("layer_types",), run="r")
    _, promoted = write_promoted(given, book, change)
    assert promoted.drafter.ref is None
    assert promoted.server.num_speculative_tokens == 2  # at most block_size - 1
    assert "(off: the trained drafter differs: layer_types)" in promoted_path(given).read_text()


def test_a_bundled_playbook_is_promoted_into_dot_playbooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert is_bundled(LAB)
    assert promoted_path(LAB) == Path("playbooks") / "lab-dflash.trained.yaml"
    assert not is_bundled(tmp_path / "mine.yaml")
