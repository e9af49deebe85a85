"""Playbooks: the reference deployment validates; --set is typed and blamed precisely."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflashops.errors import PlaybookError
from dflashops.playbook.load import load_playbook, resolve_playbook_path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "playbooks" / "qwen3.6-27b-dflash.yaml"


def test_reference_playbook_reproduces_the_deployment() -> None:
    book = load_playbook(REFERENCE)
    assert book.engine.name == "vllm"
    assert book.server.tensor_parallel_size == 2
    assert book.server.port == 30000
    assert book.server.num_speculative_tokens == 6
    assert book.drafter.method == "dflash"
    assert book.served_name == "qwen3.6-27b"
    assert book.engine.version_tuple >= (0, 26, 0)


def test_set_overrides_are_typed() -> None:
    book = load_playbook(
        REFERENCE, ["server.num_speculative_tokens=5", "bench.concurrency=[1,2,8]"]
    )
    assert book.server.num_speculative_tokens == 5
    assert book.bench.concurrency == [1, 2, 8]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("server.num_speculative_tokens=six", r"^--set:server\.num_speculative_tokens: .*integer"),
        ("server.bogus=1", r"^--set:server\.bogus: unknown key"),
        ("drafter.method=telepathy", r"^--set:drafter\.method: Input should be 'dflash'"),
        ("engine.version=latest", r"^--set:engine\.version: pin an exact release"),
        (
            "server.num_speculative_tokens",
            r"^--set:server\.num_speculative_tokens: expected KEY=VALUE",
        ),
    ],
)
def test_bad_overrides_blame_set(override: str, expected: str) -> None:
    with pytest.raises(PlaybookError, match=expected):
        load_playbook(REFERENCE, [override])


def test_file_errors_name_line(tmp_path: Path) -> None:
    text = REFERENCE.read_text().replace("  port: 30000", "  port: 99999")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    line = text.splitlines().index("  port: 99999") + 1
    with pytest.raises(PlaybookError, match=rf"p\.yaml:{line}:server\.port: .*less than or equal"):
        load_playbook(path)


def test_cross_field_rules(tmp_path: Path) -> None:
    data = yaml.safe_load(REFERENCE.read_text())
    del data["server"]["num_speculative_tokens"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlaybookError, match=r"method dflash needs server\.num_speculative_tokens"):
        load_playbook(path)
    data["drafter"] = {"method": "ngram", "model": {"path": "/x"}}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlaybookError, match=r"method ngram takes no drafter\.model"):
        load_playbook(path)


def test_resolve_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert resolve_playbook_path("qwen3.6-27b-dflash") == Path("playbooks/qwen3.6-27b-dflash.yaml")
    with pytest.raises(PlaybookError, match="no such playbook"):
        resolve_playbook_path("missing-one")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    section=st.sampled_from(["model", "drafter", "engine", "server", "bench", "tune", "zzz"]),
    key=st.sampled_from(["path", "method", "version", "port", "concurrency", "k_min", "x"]),
    value=st.one_of(
        st.none(), st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=3)
    ),
)
def test_generated_playbooks_never_traceback(
    tmp_path: Path, section: str, key: str, value: object
) -> None:
    data = yaml.safe_load(REFERENCE.read_text())
    data.setdefault(section, {})
    if isinstance(data[section], dict):
        data[section][key] = value
    path = tmp_path / "gen.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_playbook(path)
    except PlaybookError as exc:
        assert exc.one_line().startswith(str(path))
        assert "\n" not in exc.one_line()


DECAY = REPO / "playbooks" / "lab-decay.yaml"


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/models/Qwen3-DFlash-draft", "dflash"),
        ("/srv/eagle3-small", "eagle3"),
        ("/srv/EAGLE-LLaMA3", "eagle"),
        ("/opt/dspark_qwen3", "dspark"),
    ],
)
def test_draft_model_path_vllm_would_relabel_is_refused(path: str, method: str) -> None:
    # vLLM picks dflash/eagle/dspark from a draft_model's path and then loads the wrong model
    with pytest.raises(PlaybookError, match=rf"would run this draft model as {method}, not draft"):
        load_playbook(DECAY, [f"drafter.model.path={path}"])


def test_relabel_guard_is_for_draft_model_only() -> None:
    assert load_playbook(DECAY).drafter.model is not None
    dflash = load_playbook(REPO / "playbooks" / "lab-dflash.yaml")
    assert "dflash" in str(dflash.drafter.model.path if dflash.drafter.model else "")
