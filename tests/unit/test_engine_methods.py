"""A playbook names a speculative method its pinned engine release has, or it is refused before
anything is pushed, naming the first release that has it (``dflashops.playbook.engine_methods``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from dflashops.cli import cli
from dflashops.errors import PlaybookError
from dflashops.playbook.engine_methods import (
    SGLANG_METHODS,
    VLLM_METHODS,
    first_release,
    release_of,
)
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import DRAFT_CHECKPOINT_METHODS, Method, Playbook

PLAYBOOK_METHODS = set(get_args(Method)) - {"none"}

# (engine, method, the release right before it has the method, the first release that has it)
FIRSTS = [
    ("vllm", "ngram", "0.8.1", "0.8.2"),
    ("vllm", "draft_model", "0.8.1", "0.8.2"),
    ("vllm", "draft_model", "0.14.1", "0.15.0"),
    ("vllm", "eagle", "0.8.4", "0.8.5"),
    ("vllm", "eagle3", "0.8.4", "0.8.5"),
    ("vllm", "mtp", "0.10.2", "0.11.0"),
    ("vllm", "suffix", "0.11.0", "0.11.1"),
    ("vllm", "dflash", "0.19.1", "0.20.0"),
    ("vllm", "dspark", "0.24.0", "0.25.0"),
    ("sglang", "eagle", "0.4.1.post3", "0.4.1.post4"),
    ("sglang", "mtp", "0.4.3", "0.4.3.post1"),
    ("sglang", "eagle3", "0.4.4.post1", "0.4.4.post2"),
    ("sglang", "ngram", "0.5.2", "0.5.3"),
    ("sglang", "dflash", "0.5.10.post1", "0.5.11"),
    ("sglang", "dspark", "0.5.15.post1", "0.5.16"),
]


def book(
    method: str, version: str, engine: str = "vllm", device: str = "cuda", **extra: Any
) -> Playbook:
    drafter: dict[str, Any] = {"method": method}
    if method in DRAFT_CHECKPOINT_METHODS:
        drafter["model"] = {"path": "/models/drafter"}
    return Playbook.model_validate(
        {
            "name": "methods",
            "model": {"path": "/models/target"},
            "drafter": drafter,
            "engine": {"name": engine, "version": version, **extra},
            "server": {"device": device}
            | ({"num_speculative_tokens": 3} if method != "none" else {}),
        }
    )


def refusal(method: str, version: str, engine: str = "vllm", device: str = "cuda") -> str:
    with pytest.raises(ValidationError) as caught:
        book(method, version, engine, device)
    return str(caught.value.errors()[0]["msg"]).removeprefix("Value error, ")


def test_every_method_a_playbook_names_has_its_first_release_in_each_engine() -> None:
    # a method added to the playbook's Literal without its first release fails here
    assert set(VLLM_METHODS) == PLAYBOOK_METHODS
    assert set(SGLANG_METHODS) == PLAYBOOK_METHODS
    assert all(VLLM_METHODS[method] for method in PLAYBOOK_METHODS)  # vLLM serves them all
    assert first_release("vllm", "none") is None


@pytest.mark.parametrize(("engine", "method", "before", "first"), FIRSTS)
def test_the_release_before_the_first_is_refused_and_the_first_accepted(
    engine: str, method: str, before: str, first: str
) -> None:
    title = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    message = refusal(method, before, engine)
    assert message.startswith(f"drafter.method {method} needs {title} ")
    assert message.endswith(f"; the playbook pins {before}")
    assert book(method, first, engine).drafter.method == method


def test_the_refusal_names_the_first_release_that_has_the_method() -> None:
    assert refusal("suffix", "0.11.0") == (
        "drafter.method suffix needs vLLM 0.11.1 or later; the playbook pins 0.11.0"
    )
    assert refusal("eagle", "0.4.1", "sglang") == (
        "drafter.method eagle needs SGLang 0.4.1.post4 or later; the playbook pins 0.4.1"
    )


def test_draft_model_names_both_spans_and_the_gap_between_them_is_refused() -> None:
    # 0.10.0-0.14.1 raise "Speculative decoding with draft model is not supported yet"
    assert book("draft_model", "0.9.2").drafter.method == "draft_model"
    assert refusal("draft_model", "0.10.0") == (
        "drafter.method draft_model needs vLLM 0.15.0 or later, or a release from 0.8.2 before "
        "0.10.0; the playbook pins 0.10.0"
    )


def test_sglang_methods_dflashops_does_not_render_are_refused_at_any_release() -> None:
    assert refusal("suffix", "0.5.23", "sglang") == (
        "SGLang has no suffix method in dflashops; use vllm"
    )
    assert refusal("draft_model", "0.5.23", "sglang") == (
        "SGLang has no draft_model method in dflashops; use vllm"
    )


def test_vllm_cpu_speculates_from_0_21_0_only() -> None:
    assert refusal("ngram", "0.19.1", device="cpu") == (
        "vLLM's CPU build runs speculative decoding from 0.21.0; the playbook pins 0.19.1 with "
        "server.device cpu and drafter.method ngram"
    )
    # the real 0.20.0 CPU server dies at start (tests/fixtures/logs/real-vllm-0.20.0-cpu-*)
    assert refusal("dflash", "0.20.2", device="cpu") == (
        "vLLM's CPU build runs speculative decoding from 0.21.0 (0.20.x fails at start: its CPU "
        "rejection sampler lacks SYNTHETIC_MODE); the playbook pins 0.20.2 with server.device "
        "cpu and drafter.method dflash"
    )
    assert book("ngram", "0.21.0", device="cpu").server.device == "cpu"
    assert book("none", "0.19.1", device="cpu").drafter.method == "none"  # no speculation
    assert book("ngram", "0.19.1").server.device == "cuda"  # the GPU runner has it


def test_sglang_on_the_cpu_has_no_dflash_or_dspark_and_ngram_from_0_5_16() -> None:
    # a real 0.5.16 CPU server: "DFLASH speculative decoding only supports CUDA device."
    assert refusal("dflash", "0.5.16", "sglang", device="cpu") == (
        'SGLang serves dflash on CUDA only (its argument check: "DFLASH speculative decoding '
        'only supports CUDA device."); the playbook pins server.device cpu: serve dflash on a '
        "GPU, or with vLLM's CPU build"
    )
    assert "DSpark speculative decoding only supports CUDA" in refusal(
        "dspark", "0.5.16", "sglang", device="cpu"
    )
    assert refusal("ngram", "0.5.15", "sglang", device="cpu") == (
        "SGLang's CPU engine runs ngram from 0.5.16 (0.5.15 refuses it: \"Ngram speculative "
        'decoding only supports CUDA device."); the playbook pins server.device cpu'
    )
    assert book("ngram", "0.5.16", "sglang", device="cpu").drafter.method == "ngram"
    assert book("eagle3", "0.5.16", "sglang", device="cpu").drafter.method == "eagle3"
    assert book("dflash", "0.5.16", "sglang").server.device == "cuda"  # the GPU has it
    assert book("none", "0.5.15", "sglang", device="cpu").drafter.method == "none"


def test_release_numbers_compare_with_post_releases() -> None:
    assert release_of("0.4.1.post4") == (0, 4, 1, 4)
    assert release_of("0.26.0rc1") == (0, 26, 0)  # an rc counts as its release
    assert (0, 4, 1) < release_of("0.4.1.post3") < (0, 4, 1, 4) < (0, 4, 2)
    with pytest.raises(ValueError, match="not a release"):
        release_of("latest")


def test_the_drafter_checks_read_the_same_first_releases() -> None:
    """The drafter layer (above the playbook) imports the DFlash and DSpark firsts from this
    table and states some other firsts for its own findings: they must agree with it."""
    from dflashops.drafter import checks_draft_model, checks_lookup, checks_mtp_arch
    from dflashops.drafter.checks_eagle_class import VLLM_FIRST_EAGLE3

    assert checks_lookup.SUFFIX_VLLM.first_with == first_release("vllm", "suffix")
    assert checks_lookup.NGRAM_SGLANG.first_with == first_release("sglang", "ngram")
    assert checks_draft_model.DRAFT_VLLM.first_with == first_release("vllm", "draft_model")
    assert VLLM_METHODS["draft_model"][0].until == checks_draft_model.VLLM_V0_ONLY
    assert checks_mtp_arch.VLLM_GENERIC_MTP.first_with == first_release("vllm", "mtp")
    assert first_release("vllm", "eagle3") == VLLM_FIRST_EAGLE3


def test_base_venv_version_placeholder_follows_the_pin(tmp_path: Path) -> None:
    lab = book("ngram", "0.21.0", device="cpu", base_venv="/opt/lab/venv-vllm-cpu-{version}")
    assert lab.engine.base_venv == Path("/opt/lab/venv-vllm-cpu-0.21.0")
    path = tmp_path / "lab.yaml"
    path.write_text(
        "name: lab\nmodel: {path: /models/m}\n"
        "engine: {version: 0.32.0, base_venv: '/opt/lab/venv-vllm-cpu-{version}'}\n"
    )
    moved = load_playbook(path, ["engine.version=0.26.0"])
    assert moved.engine.base_venv == Path("/opt/lab/venv-vllm-cpu-0.26.0")
    assert book("none", "0.32.0", base_venv="/opt/venv").engine.base_venv == Path("/opt/venv")


def test_base_venv_engine_placeholder_follows_the_engine(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(
        "name: lab\nmodel: {path: /models/m}\nserver: {device: cpu}\n"
        "engine: {version: 0.32.0, base_venv: '/opt/lab/venv-{engine}-cpu-{version}'}\n"
    )
    assert load_playbook(path).engine.base_venv == Path("/opt/lab/venv-vllm-cpu-0.32.0")
    moved = load_playbook(path, ["engine.name=sglang", "engine.version=0.5.16"])
    assert moved.engine.base_venv == Path("/opt/lab/venv-sglang-cpu-0.5.16")


@pytest.mark.parametrize(
    ("base_venv", "what"),
    [
        ("/opt/lab/venv-{python}-{version}", "unknown placeholder {python}"),
        ("/opt/lab/venv-{Version}", "unknown placeholder {Version}"),
        ("/opt/lab/venv-{version", "unknown brace"),
    ],
)
def test_any_other_placeholder_in_base_venv_is_refused(base_venv: str, what: str) -> None:
    with pytest.raises(ValidationError) as caught:
        book("none", "0.32.0", base_venv=base_venv)
    error = caught.value.errors()[0]
    assert error["loc"] == ("engine", "base_venv")
    assert error["msg"] == f"Value error, {what}: only {{version}} and {{engine}} are replaced"


def _write(path: Path, version: str, method: str) -> Path:
    path.write_text(
        f"name: old\ncontainer: ct\nmodel: {{path: /models/m}}\ndrafter: {{method: {method}}}\n"
        f"engine: {{name: vllm, version: {version}}}\nserver: {{num_speculative_tokens: 3}}\n"
    )
    return path


def test_launch_refuses_the_method_before_it_reads_the_inventory(tmp_path: Path) -> None:
    """DESIGN.md: an invalid playbook exits 2. The inventory named does not exist: the refusal
    comes first, so nothing reached a container."""
    playbook = _write(tmp_path / "old.yaml", "0.11.0", "suffix")
    missing = tmp_path / "no-inventory.yaml"
    args = ["-i", str(missing), "launch", "ct", "-p", str(playbook), "--dry-run"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "drafter.method suffix needs vLLM 0.11.1 or later; the playbook pins 0.11.0" in (
        result.output
    )
    assert "no-inventory" not in result.output
    result = CliRunner().invoke(cli, ["playbook", "show", str(playbook)])
    assert result.exit_code == 2
    assert "needs vLLM 0.11.1 or later" in result.output


def test_set_engine_version_is_blamed_for_the_refusal(tmp_path: Path) -> None:
    playbook = _write(tmp_path / "new.yaml", "0.32.0", "suffix")
    with pytest.raises(PlaybookError, match=r"^--set:engine\.version: drafter\.method suffix"):
        load_playbook(playbook, ["engine.version=0.11.0"])
