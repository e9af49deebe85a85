"""Property: whatever a playbook value contains (``;``, ``$()``, backticks, quotes, newlines),
the rendered launch script never runs it.

Each example renders the files with such values in paths, arguments, env values and the API
key, checks the scripts with ``bash -n``, then really runs ``launch.sh``: it execs a stub
"python" that execs the real bundled server (``python -m dflashops.server``: preflight, then
``execvpe``), which execs the stub again as the "engine"; the stub records the argv and env it
got. The values must arrive byte for byte, and no canary file may appear.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dflashops.deployment.layout import Layout
from dflashops.launch.render import RenderInputs, render
from dflashops.playbook.models import Playbook

REPO = Path(__file__).resolve().parents[2]
CANARY = Path(tempfile.gettempdir()) / f"dflashops-canary-{os.getpid()}"
PAYLOADS = [
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY}",
    f"'; touch {CANARY}; '",
    f'"; touch {CANARY}; "',
    f"\ntouch {CANARY}\n",
    f"$(touch {CANARY}",
    "${PATH}",
    "$((1+1))",
    "a\\",
    "*",
    "~",
    "-e",
    "&& touch canary-rel",
    "|touch canary-rel",
    "> canary-rel",
]
SHELL_CHARS = ";$()`'\"\\\n\t |&<>*?~{}#!=%-"
texts = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(SHELL_CHARS)),
        st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    ),
    max_size=12,
)
values = st.one_of(
    st.sampled_from(PAYLOADS),
    texts,
    st.tuples(texts, st.sampled_from(PAYLOADS), texts).map("".join),
)
nonempty = values.filter(bool)
# one path component: anything but "/" and NUL, not . or ..
names = nonempty.map(lambda v: v.replace("/", "_")).filter(lambda v: v not in (".", ".."))

STUB = """#!{python}
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["-m", "dflashops.server"]:
    os.execv({python!r}, [{python!r}, *args])
with open({record!r}, "w", encoding="utf-8", errors="surrogateescape") as out:
    json.dump({{"argv": args, "env": dict(os.environ)}}, out)
"""


def run_launch_script(
    root: Path,
    weird: str,
    *,
    env_values: dict[str, str],
    extra_args: list[str],
    served: str,
    api_key: str,
) -> tuple[dict[str, Any], list[str]]:
    base = root / weird
    layout = Layout(
        etc=str(base / "etc"), state=str(base / "state"), log_dir=str(base / "log"), opt="/x"
    )
    stub = base / "venv" / "bin" / "python"
    stub.parent.mkdir(parents=True)
    record = root / "record.json"
    stub.write_text(STUB.format(python=sys.executable, record=str(record)))
    stub.chmod(0o755)
    model = base / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    book = Playbook.model_validate(
        {
            "name": "shell",
            "model": {"path": str(model), "served_name": served},
            "engine": {"name": "vllm", "version": "0.32.0"},
            "server": {"device": "cpu", "extra_args": extra_args, "env": env_values},
        }
    )
    rendered = render(
        book,
        RenderInputs(supervisor="fallback", venv_python=str(stub), api_key=api_key, layout=layout),
    )
    for f in rendered.files:
        path = Path(f.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.content)
        path.chmod(f.mode)
        if f.path.endswith(".sh"):
            check = subprocess.run(["bash", "-n", f.path], capture_output=True, check=False)
            assert check.returncode == 0, check.stderr
    work = root / "cwd"
    work.mkdir()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(root)}
    done = subprocess.run(
        ["sh", layout.launch_script],
        cwd=work,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    log = Path(layout.log).read_text(errors="replace") if Path(layout.log).exists() else ""
    assert done.returncode == 0, f"{done.stderr!r} {log}"
    assert not any(work.iterdir()), list(work.iterdir())
    recorded: dict[str, Any] = json.loads(record.read_text(encoding="utf-8"))
    return recorded, rendered.spec.argv


@settings(
    max_examples=int(os.environ.get("DFLASHOPS_SHELL_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# found by this test: a path with a newline, interpolated into a "#" comment, ran its next line
@example(weird=f"\ntouch {CANARY.name}\n", env_values={}, extra_args=[], served="s", api_key="k")
@given(
    weird=names,
    env_values=st.dictionaries(st.sampled_from(["A_1", "B_2", "LONG_NAME"]), values, max_size=3),
    extra_args=st.lists(nonempty, max_size=3),
    served=nonempty,
    api_key=nonempty,
)
def test_values_are_never_executed(
    weird: str, env_values: dict[str, str], extra_args: list[str], served: str, api_key: str
) -> None:
    CANARY.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="dflashops-shell-") as tmp:
        recorded, argv = run_launch_script(
            Path(tmp),
            weird,
            env_values=env_values,
            extra_args=extra_args,
            served=served,
            api_key=api_key,
        )
    assert not CANARY.exists(), "a value was executed"
    assert recorded["argv"] == argv[1:]
    for name, value in env_values.items():
        assert recorded["env"][name] == value
    assert recorded["env"]["VLLM_API_KEY"] == api_key


def test_a_plain_example_runs(tmp_path: Path) -> None:
    recorded, _ = run_launch_script(
        tmp_path,
        "plain",
        env_values={"A_1": "x"},
        extra_args=["--dtype", "bfloat16"],
        served="tiny",
        api_key="key",
    )
    assert recorded["argv"][:3] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    assert recorded["argv"][-2:] == ["--dtype", "bfloat16"]
    assert recorded["env"]["A_1"] == "x"
