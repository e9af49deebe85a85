"""The opt-in collective check (issue 23): the bandwidth arithmetic, and how a playbook turns it
on. The all-reduce itself runs for real in tests/integration/test_collective_check.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.launch.render import RenderInputs, render, venv_python
from dflashops.playbook.load import load_playbook
from dflashops.server.collective import bus_bandwidth
from dflashops.server.entry import main
from dflashops.server.preflight import ExitCode
from dflashops.server.spec import ServerSpec, SpecError

LAB_BOOK = Path(__file__).resolve().parents[2] / "playbooks" / "lab-dflash.yaml"
GPU_BOOK = Path(__file__).resolve().parents[2] / "playbooks" / "qwen3.6-27b-dflash.yaml"


@pytest.mark.parametrize(
    ("world", "bus_over_alg"),
    [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)],  # nccl-tests' all-reduce factor 2 (n - 1) / n
)
def test_bus_bandwidth_is_nccl_tests_busbw(world: int, bus_over_alg: float) -> None:
    algbw, busbw = bus_bandwidth(2**30, 0.01, world)
    assert algbw == pytest.approx(107.374, rel=1e-4)  # 1 GiB in 10 ms
    assert busbw == pytest.approx(algbw * bus_over_alg)


def spec_of(book_path: Path, *overrides: str) -> ServerSpec:
    book = load_playbook(book_path, overrides)
    inputs = RenderInputs(supervisor="fallback", venv_python=venv_python(book))
    return render(book, inputs).spec


def test_the_playbook_opts_in_and_only_a_gpu_server_gets_it() -> None:
    assert spec_of(GPU_BOOK).collective_check is False  # opt-in: the default adds no time
    assert spec_of(GPU_BOOK, "server.collective_check=true").collective_check is True
    # the lab's CPU server has no NCCL to check: the key renders off whatever the playbook says
    assert spec_of(LAB_BOOK, "server.collective_check=true").collective_check is False


def test_the_spec_key_is_typed() -> None:
    data = spec_of(GPU_BOOK).to_dict()
    with pytest.raises(SpecError, match="collective_check must be bool, not str"):
        ServerSpec.from_dict({**data, "collective_check": "yes"})


def test_a_cpu_spec_asked_for_the_check_says_it_did_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    spec = ServerSpec(
        engine="vllm", engine_version="0.32.0", argv=["true"], model=str(model), expect_cuda=False
    )
    path = tmp_path / "server.json"
    path.write_text(spec.to_json())
    assert main(["--spec", str(path), "--preflight-only", "--collective-check"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert '"name": "collective"' in out and "not checked (expect_cuda is false)" in out
