"""The launch templates: found in a checkout and in an installed wheel, strict about undefined
and unquoted values, and rendered files compared to committed snapshots per engine and method.

Regenerate the snapshots after an intended change with
``DFLASHOPS_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/unit/test_templates.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dflashops.deployment.layout import Layout
from dflashops.errors import PlaybookError, TemplateRenderError
from dflashops.launch.args import TargetFacts, hybrid_from_config
from dflashops.launch.render import Rendered, RenderInputs, render, venv_python
from dflashops.launch.templates import Quoted, render_template, shell_quote, templates_dir
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "fixtures" / "launch" / "snapshots"
UPDATE_ENV = "DFLASHOPS_UPDATE_SNAPSHOTS"


def playbook(engine: str = "vllm", method: str = "dflash", **server: Any) -> Playbook:
    drafter: dict[str, Any] = {"method": method}
    if method in ("dflash", "eagle3", "draft_model"):
        drafter["model"] = {"path": f"/models/drafter-{method}"}
    if method == "ngram" and engine == "vllm":  # SGLang >= 0.5.10 has no window bounds
        drafter.update(prompt_lookup_min=2, prompt_lookup_max=4)
    settings: dict[str, Any] = {"port": 30000, "max_model_len": 8192, **server}
    if method != "none":
        settings.setdefault("num_speculative_tokens", 6)
    return Playbook.model_validate(
        {
            "name": f"{engine}-{method}",
            "model": {"path": "/models/Target", "served_name": "target"},
            "drafter": drafter,
            "engine": {"name": engine, "version": "0.32.0" if engine == "vllm" else "0.5.23"},
            "server": settings,
        }
    )


def inputs(book: Playbook, **changes: Any) -> RenderInputs:
    base: dict[str, Any] = {"supervisor": "fallback", "venv_python": venv_python(book)}
    base.update(changes)
    return RenderInputs(**base)


CASES: dict[str, tuple[Playbook, dict[str, Any]]] = {
    "vllm-dflash-gpu-tp2-systemd": (
        playbook(
            tensor_parallel_size=2,
            api_key_env="VLLM_API_KEY",
            extra_args=["--max-num-batched-tokens", "32768"],
        ),
        {
            "supervisor": "systemd",
            "required_env": {"VLLM_USE_V2_MODEL_RUNNER": "1"},
            "api_key": "example-key-not-secret",
        },
    ),
    "vllm-dflash-lab-cpu": (load_playbook(REPO / "playbooks" / "lab-dflash.yaml"), {}),
    "vllm-mtp": (playbook(method="mtp"), {}),
    "vllm-eagle3": (playbook(method="eagle3", attention_backend="FLASHINFER"), {}),
    "vllm-ngram": (playbook(method="ngram", enforce_eager=True), {}),
    "vllm-draft_model": (playbook(method="draft_model"), {}),
    "vllm-none": (playbook(method="none", gpu_memory_utilization=0.85), {}),
    "sglang-dflash-hybrid": (
        playbook("sglang", "dflash", attention_backend="fa3"),
        {"target": TargetFacts(hybrid_linear_attention=True)},
    ),
    "sglang-mtp": (playbook("sglang", "mtp"), {}),
    "sglang-eagle3": (playbook("sglang", "eagle3", enforce_eager=True), {}),
    "sglang-ngram": (playbook("sglang", "ngram"), {}),
    "sglang-none": (playbook("sglang", "none"), {}),
}


def snapshot_text(rendered: Rendered) -> str:
    parts = [f"### {f.path} (mode {f.mode:o})\n{f.content.decode()}" for f in rendered.files]
    return "\n".join(parts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_files_match_snapshot(case: str) -> None:
    book, changes = CASES[case]
    rendered = render(book, inputs(book, **changes))
    text = snapshot_text(rendered)
    path = SNAPSHOTS / f"{case}.txt"
    if os.environ.get(UPDATE_ENV):
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no snapshot {path.name}; run with {UPDATE_ENV}=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"{case} differs from {path.name}"


def test_every_snapshot_has_a_case() -> None:
    assert {p.stem for p in SNAPSHOTS.glob("*.txt")} == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_scripts_parse_and_spec_round_trips(case: str) -> None:
    from dflashops.server.spec import ServerSpec

    book, changes = CASES[case]
    rendered = render(book, inputs(book, **changes))
    for f in rendered.files:
        if f.path.endswith(".sh"):
            done = subprocess.run(["sh", "-n"], input=f.content, capture_output=True, check=False)
            assert done.returncode == 0, done.stderr
    spec = ServerSpec.from_json(rendered.file("/etc/dflashops/server.json").content.decode())
    assert spec == rendered.spec


def test_speculative_config_is_json_from_data() -> None:
    book = playbook(method="ngram")
    argv = render(book, inputs(book)).spec.argv
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {
        "method": "ngram",
        "num_speculative_tokens": 6,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }


def test_api_key_only_in_the_secrets_file_mode_600() -> None:
    book = playbook(api_key_env="MY_KEY")
    rendered = render(book, inputs(book, api_key="k3y'$(touch /tmp/x)"))
    secret = rendered.file("/etc/dflashops/secrets.env")
    assert secret.mode == 0o600 and secret.secret
    for f in rendered.files:
        if f is not secret:
            assert b"k3y" not in f.content
    assert "--api-key" not in rendered.spec.argv
    assert b"VLLM_API_KEY='k3y'\"'\"'$(touch /tmp/x)'" in secret.content


def test_dflash_attention_backend_on_gpu_and_cpu() -> None:
    gpu = render(playbook(), inputs(playbook())).spec.argv
    assert gpu[gpu.index("--attention-backend") + 1] == "FLASH_ATTN"
    cpu_book = playbook(device="cpu")
    assert "--attention-backend" not in render(cpu_book, inputs(cpu_book)).spec.argv
    with pytest.raises(PlaybookError, match="non-causal"):
        render(playbook(attention_backend="FLASHINFER"), inputs(playbook()))


def test_forced_launch_keeps_the_method_in_argv_but_not_in_the_spec() -> None:
    book = playbook()
    spec = render(book, inputs(book, skip_drafter_validation=True)).spec
    assert spec.method is None and spec.drafter == "/models/drafter-dflash"
    assert '"method":"dflash"' in spec.argv[spec.argv.index("--speculative-config") + 1]


@pytest.mark.parametrize(
    ("config", "hybrid"),
    [
        ({"model_type": "qwen3"}, False),
        ({"model_type": "qwen3_next"}, True),
        ({"text_config": {"layer_types": ["linear_attention", "full_attention"]}}, True),
        ({"layer_types": ["sliding_attention", "full_attention"]}, False),
    ],
)
def test_hybrid_targets(config: dict[str, Any], hybrid: bool) -> None:
    assert hybrid_from_config(config) is hybrid


def test_sglang_refuses_an_api_key_env() -> None:
    book = playbook("sglang", "none", api_key_env="KEY")
    with pytest.raises(PlaybookError, match="not supported with SGLang"):
        render(book, inputs(book, api_key="x"))


def test_playbook_env_wins_over_required_env() -> None:
    book = playbook(env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    spec = render(book, inputs(book, required_env={"VLLM_USE_V2_MODEL_RUNNER": "1"})).spec
    assert spec.env["VLLM_USE_V2_MODEL_RUNNER"] == "0"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    book, changes = CASES["vllm-dflash-gpu-tp2-systemd"]
    layout = Layout(etc=str(tmp_path / "etc"), systemd_dir=str(tmp_path / "units"))
    rendered = render(book, inputs(book, **{**changes, "layout": layout}))
    for f in rendered.files:
        Path(f.path).parent.mkdir(parents=True, exist_ok=True)
        Path(f.path).write_bytes(f.content)
        Path(f.path).chmod(f.mode)
    done = subprocess.run(
        ["systemd-analyze", "verify", layout.unit], capture_output=True, text=True, check=False
    )
    # systemd < 254 does not know the restart back-off keys; it ignores them, and that is fine
    problems = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and "RestartSteps" not in line and "RestartMaxDelaySec" not in line
    ]
    assert done.returncode == 0 and not problems, done.stderr


# --------------------------------------------------------------------------- the environment


def test_templates_found_in_the_checkout() -> None:
    assert templates_dir() == REPO / "templates"


def test_templates_found_in_an_installed_layout(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "dflashops"
    shutil.copytree(REPO / "templates", package / "templates")
    assert templates_dir(package) == package / "templates"
    with pytest.raises(TemplateRenderError, match="templates not found"):
        templates_dir(tmp_path / "elsewhere" / "dflashops")


def test_unquoted_interpolation_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.j2").write_text("echo {{ value }}\n")
    (tmp_path / "good.j2").write_text("echo {{ value|q }}\n")
    with pytest.raises(TemplateRenderError, match="without a quoting filter"):
        render_template("bad.j2", {"value": "$(reboot)"}, tmp_path)
    assert render_template("good.j2", {"value": "$(reboot)"}, tmp_path) == "echo '$(reboot)'\n"


def test_undefined_values_are_refused(tmp_path: Path) -> None:
    (tmp_path / "t.j2").write_text("echo {{ missing|q }}\n")
    with pytest.raises(TemplateRenderError, match="missing"):
        render_template("t.j2", {}, tmp_path)


@pytest.mark.parametrize("value", [None, True, ["a"], {"a": 1}])
def test_quote_refuses_non_scalars(value: Any) -> None:
    with pytest.raises(TemplateRenderError):
        shell_quote(value)


@pytest.mark.parametrize(
    ("name", "filter_name", "value"),
    [("envname", "envname", "BAD-NAME"), ("unit", "unit", "a b"), ("unit", "unit", "x;y")],
)
def test_checked_filters_refuse_unsafe_text(
    tmp_path: Path, name: str, filter_name: str, value: str
) -> None:
    (tmp_path / "t.j2").write_text(f"{{{{ value|{filter_name} }}}}\n")
    with pytest.raises(TemplateRenderError):
        render_template("t.j2", {"value": value}, tmp_path)


def test_quoted_is_a_str() -> None:
    assert isinstance(shell_quote("a b"), Quoted)
    assert shell_quote("a b") == "'a b'"
