"""A fixed, seeded corpus of hostile inputs for the real CLI (issue 20's "Done when").

Each :class:`Case` is one command line that needs no network (``inventory show|check``,
``playbook show``, ``playbook show --set``, ``drafter check``, ``parse-log``, ``tune-offline``,
``report``, and option parsing of ``launch``/``bench``) with the files it reads, made hostile by
one mutation (a fifth of the YAML cases: two) from ``hostile_mutations``: a value of the wrong
type, a huge, negative or non-finite number, deep nesting, an alias bomb, a long string,
NUL/control/non-UTF-8 bytes, an unknown key, a secret of the wrong type, or damage to the file's
text. The "paths" family gives every command that reads a file a path no file can have, one
that never ends (``/dev/zero``), blocks (a FIFO) or is a folder. ``launch --dry-run`` past its
playbook is not in the corpus: it reads the container over SSH.

One module, not one per family: the families share the bases, the secrets and :class:`Case`,
and read best side by side.

The corpus is the same on every run (``SEED``): a failing case is reproduced by its id
(``pytest -k inventory-0042``), and :meth:`Case.describe` shows what was done to what.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dflashops.errors import printable
from tests.support.hostile_mutations import (
    JSON_VALUES,
    YAML_VALUES,
    binary_secret,
    damage,
    dotted,
    insert_key,
    json_paths,
    json_with,
    replace_span,
    yaml_spans,
)

SEED = 20  # issue 20
REPO = Path(__file__).resolve().parents[2]
DIR = "@DIR@"  # the case's own folder, in arguments, names and file contents

# Values that must never appear in any output: an env secret, a file secret and inline ones.
ENV_SECRET = "Zq9envS3cretValue"
FILE_SECRET = "Zq9fileS3cretValue"
INLINE_SECRET = "Zq9inlineS3cretValue"
SECRETS = (ENV_SECRET, FILE_SECRET, INLINE_SECRET)

INVENTORY_BASES = {
    "example": (REPO / "inventory" / "example.yaml").read_text(),
    "small": """\
version: 1
clusters:
  c1:
    api_url: https://127.0.0.1:9
    timeout_s: 2
    verify_tls: true
    auth: {user: root@pam, password: {env: PVE_PASSWORD}}
    nodes: {n1: {ssh: {host: 127.0.0.1, user: root}}}
defaults:
  template: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst
  cores: 2
  memory_mb: 2048
containers:
  ct1:
    vmid: 901
    network: {bridge: vmbr0, ip: 10.200.0.5/24, gateway: 10.200.0.1}
    mounts:
      - {host_path: /tank/models, path: /models, read_only: true}
""",
}
PLAYBOOK_BASES = {
    name: (REPO / "playbooks" / f"{name}.yaml").read_text()
    for name in ("lab-dflash", "lab-decay", "qwen3.6-27b-dflash")
}
DRAFTER = REPO / "tests" / "fixtures" / "drafter" / "qwen36-27b-dflash-corrected"
TARGET = REPO / "tests" / "fixtures" / "drafter" / "qwen36-27b-target"
LOGS = sorted((REPO / "tests" / "fixtures" / "logs" / "public").glob("*.log"))


@dataclass(frozen=True)
class Case:
    """One hostile command line and the files it reads."""

    family: str
    index: int
    mutation: str
    args: tuple[str, ...]
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # name -> (content, mode)
    env: dict[str, str] = field(default_factory=dict)
    names: tuple[str, ...] = ()  # an error line must name one of these (file or option)
    codes: frozenset[int] = frozenset(range(5))  # exit codes allowed
    fifos: tuple[str, ...] = ()  # named pipes made in the case's folder (opening one blocks)

    @property
    def id(self) -> str:
        label = "".join(c if c.isalnum() or c in "._" else "-" for c in self.mutation)
        label = "-".join(part for part in label.split("-") if part)  # no runs of dashes
        return f"{self.family}-{self.index:04d}-{label[:60].strip('-')}"

    def materialize(self, folder: Path) -> tuple[list[str], list[str]]:
        """Write the files under ``folder``; the arguments and names with ``@DIR@`` resolved."""
        for name, (content, mode) in self.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.replace(DIR.encode(), str(folder).encode()))
            path.chmod(mode)
        for name in self.fifos:
            os.mkfifo(folder / name)
        here = str(folder)
        return [a.replace(DIR, here) for a in self.args], [n.replace(DIR, here) for n in self.names]

    def describe(self) -> str:
        """What a reader needs to reproduce the case (files shown cut)."""
        shown = [f"case {self.id}", f"  mutation: {self.mutation[:300]!r}"]
        shown.append(f"  args: {[a if len(a) < 200 else a[:200] + '…' for a in self.args]}")
        if self.env:
            shown.append(f"  env: {sorted(self.env)}")
        for name, (content, mode) in self.files.items():
            if name not in SECRET_FILES:  # those are the same in every case
                shown.append(
                    f"  file {name} ({len(content)} bytes, mode {mode:o}): {content[:300]!r}"
                )
        shown.append(f"  reproduce: pytest tests/unit/test_hostile_corpus.py -k {self.id!r}")
        return "\n".join(shown)


Family = Callable[[random.Random, int], Case]


# ---------------------------------------------------------------- inventory


def _password_mutations() -> list[tuple[str, str]]:
    s = INLINE_SECRET
    return [
        ("inline", s),
        ("list", f"[{s}]"),
        ("map", f"{{value: {s}}}"),
        ("binary", binary_secret(s)),
        ("number", "7"),
        ("env-list", f"{{env: [{s}]}}"),
        ("env-not-a-name", f"{{env: '{s}-x y'}}"),
        ("env-and-extra", f"{{env: PVE_PASSWORD, extra: {s}}}"),
        ("file-list", f"{{file: [{s}]}}"),
        ("file-and-env", f"{{file: {DIR}/pw, env: PVE_PASSWORD}}"),
        ("file", f"{{file: {DIR}/pw}}"),
        ("file-readable", f"{{file: {DIR}/pw-open}}"),
        ("file-nul", f"{{file: {DIR}/pw-nul}}"),
        ("file-latin1", f"{{file: {DIR}/pw-latin1}}"),
        ("file-empty", f"{{file: {DIR}/pw-empty}}"),
        ("file-dir", f"{{file: {DIR}}}"),
        ("file-dev-zero", "{file: /dev/zero}"),  # never ends: all memory, once
        ("file-fifo", f"{{file: {DIR}/fifo}}"),  # opening it waited for a writer forever
        ("file-long-name", "{file: " + "x" * 5000 + "}"),
        ("env-empty", "{env: EMPTY_SECRET}"),
        ("env-unset", "{env: UNSET_SECRET_G20}"),
    ]


SECRET_FILES = {
    "pw": (FILE_SECRET.encode() + b"\n", 0o600),
    "pw-open": (FILE_SECRET.encode() + b"\n", 0o644),
    "pw-nul": (FILE_SECRET.encode() + b"\x00\n", 0o600),
    "pw-latin1": (b"\xe9" + FILE_SECRET.encode(), 0o600),
    "pw-empty": (b"", 0o600),
}
SECRET_ENV = {"PVE_PASSWORD": ENV_SECRET, "EMPTY_SECRET": ""}


def _yaml_mutation(rng: random.Random, text: str, secret_key: str | None) -> tuple[str, bytes]:
    """One mutation of a YAML document: (label, new content)."""
    spans = yaml_spans(text)
    roll = rng.random()
    if roll < 0.55:
        span = rng.choice(spans)
        label, snippet = rng.choice(YAML_VALUES)
        changed = replace_span(text, span, snippet)
        return f"{span.path}@{span.line}={label} ({_line(changed, span.line)})", changed.encode()
    if roll < 0.65:
        mappings = [s for s in spans if s.block_mapping] or spans
        span = rng.choice(mappings)
        label, snippet = rng.choice(YAML_VALUES[:20])
        line = f"zz_unknown_{rng.randrange(1000)}: {snippet}"
        return f"unknown-key-in-{span.path}={label}", insert_key(text, span, line).encode()
    if roll < 0.75 and secret_key is not None:
        span = next(s for s in spans if s.path.endswith(secret_key))
        label, snippet = rng.choice(_password_mutations())
        changed = replace_span(text, span, snippet)
        return f"secret-{label} ({_line(changed, span.line)})", changed.encode()
    label, content = damage(rng, text.encode())
    return f"damage-{label}", content


def _line(text: str, number: int) -> str:
    """Line ``number`` of ``text``, cut: where a mutation landed, for the failure message."""
    line = text.split("\n")[number - 1].strip()
    return f"line {number}: {line[:100]}" + ("…" if len(line) > 100 else "")


def _twice(rng: random.Random, text: str, secret_key: str | None) -> tuple[str, bytes]:
    """One mutation, and a fifth of the time a second one on top (when the first left YAML
    that still parses): two wrongs must still give one line."""
    mutation, content = _yaml_mutation(rng, text, secret_key)
    if rng.random() < 0.2:
        try:
            again, content = _yaml_mutation(rng, content.decode(), secret_key)
        except (yaml.YAMLError, UnicodeDecodeError, RecursionError, StopIteration, IndexError):
            return mutation, content
        mutation = f"{mutation} + {again}"
    return mutation, content


def inventory_case(rng: random.Random, index: int) -> Case:
    base = rng.choice(sorted(INVENTORY_BASES))
    text = INVENTORY_BASES[base]
    mutation, content = _twice(rng, text, "auth.password")
    if "secret-" in mutation:  # `check` resolves every secret: the path a value could leak on
        command = ["inventory", "check"] if rng.random() < 0.6 else ["inventory", "show"]
    else:
        command = rng.choice(
            [["inventory", "show"], ["inventory", "show", "--json"], ["inventory", "check"]]
        )
    return Case(
        family="inventory",
        index=index,
        mutation=f"{base}: {mutation}",
        args=("-i", f"{DIR}/inv.yaml", *command),
        files={"inv.yaml": (content, 0o600), **SECRET_FILES},
        env=SECRET_ENV,
        names=(f"{DIR}/inv.yaml", f"{DIR}/pw", DIR),
        fifos=("fifo",),
    )


# ---------------------------------------------------------------- playbook and --set


def _playbook_secret(rng: random.Random, text: str) -> tuple[str, bytes]:
    s = INLINE_SECRET
    spans = {span.path: span for span in yaml_spans(text)}
    options = []
    if "server.env" in spans and spans["server.env"].block_mapping:
        for name in ("VLLM_API_KEY", "HF_TOKEN", "MY_SECRET", "DB_PASSWORD"):
            options.append((f"env-{name}", insert_key(text, spans["server.env"], f"{name}: {s}")))
        options.append(("env-list", insert_key(text, spans["server.env"], f"HF_TOKEN: [{s}]")))
    if "server.extra_args" in spans:
        for label, args in (("api-key", f"[--api-key, {s}]"), ("hf-token", f"['--hf-token={s}']")):
            options.append((f"args-{label}", replace_span(text, spans["server.extra_args"], args)))
    label, content = rng.choice(options)
    return f"secret-{label}", content.encode()


def playbook_case(rng: random.Random, index: int) -> Case:
    base = rng.choice(sorted(PLAYBOOK_BASES))
    text = PLAYBOOK_BASES[base]
    if rng.random() < 0.1:
        mutation, content = _playbook_secret(rng, text)
    else:
        mutation, content = _twice(rng, text, None)
    command = ["playbook", "show", f"{DIR}/playbook.yaml"] + (
        ["--json"] if rng.random() < 0.5 else []
    )
    return Case(
        family="playbook",
        index=index,
        mutation=f"{base}: {mutation}",
        args=tuple(command),
        files={"playbook.yaml": (content, 0o644)},
        names=(f"{DIR}/playbook.yaml",),
    )


SET_KEYS_HOSTILE = [
    "",
    ".",
    "..",
    "server..port",
    "server.port.",
    "k" * 10_000,
    "server.env.",
    "server.extra_args[0]",
    "server.extra_args[99999999999999999999]",
    "server.extra_args[-1]",
    "bench.concurrency[0]",
    "no.such.deep.key",
    "server.\x00",
    "server.port\n",
    "server.env.A=B",
    "__class__",
    "server.__dict__",
    "server." + ".".join(["x"] * 500),
    "ÿ.\u202e",
]


def set_case(rng: random.Random, index: int) -> Case:
    base = rng.choice(sorted(PLAYBOOK_BASES))
    keys = [span.path for span in yaml_spans(PLAYBOOK_BASES[base])]
    roll = rng.random()
    if roll < 0.1:
        s = INLINE_SECRET
        item = rng.choice(
            [
                f"server.env.VLLM_API_KEY={s}",
                f"server.env.HF_TOKEN=[{s}]",
                f"server.env.aws_secret_access_key={s}",
                f"server.extra_args=[--api-key, {s}]",
                f"server.extra_args=['--hf-token={s}']",
            ]
        )
        mutation = "secret " + item.split("=", 1)[0]
    elif roll < 0.2:
        item = rng.choice(["noequals", "=1", "server.port==1", "=", "server.port", "a=b=c"])
        mutation = f"malformed {item!r}"
    else:
        key = rng.choice(SET_KEYS_HOSTILE) if roll < 0.35 else rng.choice(keys)
        label, value = rng.choice(YAML_VALUES)
        item = f"{key}={value}"
        mutation = f"{key[:60]}={label}"
    sets = ["--set", item]
    if rng.random() < 0.2:  # a valid override next to it must not change the outcome's shape
        sets += ["--set", "server.num_speculative_tokens=3"]
    return Case(
        family="set",
        index=index,
        mutation=f"{base}: {mutation}",
        args=("playbook", "show", str(REPO / "playbooks" / f"{base}.yaml"), *sets),
        names=("--set",),
    )


# ---------------------------------------------------------------- drafter config


def _json_mutation(rng: random.Random, data: object) -> tuple[str, str]:
    paths = list(json_paths(data))
    path = rng.choice(paths)
    if rng.random() < 0.12:
        return f"{dotted(path)}=removed", json_with(data, path, None)
    label, raw = rng.choice(JSON_VALUES)
    return f"{dotted(path)}={label}", json_with(data, path, raw)


def drafter_case(rng: random.Random, index: int) -> Case:
    files = {f"drafter/{p.name}": (p.read_bytes(), 0o644) for p in sorted(DRAFTER.iterdir())}
    roll = rng.random()
    if roll < 0.65:
        name = "drafter/config.json"
        mutation, text = _json_mutation(rng, json.loads(files[name][0]))
        files[name] = (text.encode(), 0o644)
    elif roll < 0.8:
        name = "drafter/config.json"
        label, content = damage(rng, files[name][0])
        mutation, files[name] = f"damage-{label}", (content, 0o644)
    elif roll < 0.9:
        name = "drafter/model.safetensors.index.json"
        mutation, text = _json_mutation(rng, json.loads(files[name][0]))
        files[name] = (text.encode(), 0o644)
    else:
        name = "drafter/model-00001-of-00002.safetensors"
        mutation, files[name] = _safetensors_damage(rng, files[name][0])
    args = ["drafter", "check", f"{DIR}/drafter", "--target", str(TARGET)]
    args += rng.choice([[], ["--json"], ["--k", "4"], ["--engine", "vllm==0.26.0", "--json"]])
    return Case(
        family="drafter",
        index=index,
        mutation=f"{name.split('/')[-1]}: {mutation}",
        args=tuple(args),
        files=files,
        names=(f"{DIR}/drafter",),
    )


def _safetensors_damage(rng: random.Random, content: bytes) -> tuple[str, tuple[bytes, int]]:
    size = int.from_bytes(content[:8], "little")
    header, rest = content[8 : 8 + size], content[8 + size :]
    kind = rng.choice(["length-huge", "length-zero", "length-past-end", "header-json", "truncate"])
    if kind == "length-huge":
        new = (2**63).to_bytes(8, "little") + content[8:]
    elif kind == "length-zero":
        new = (0).to_bytes(8, "little") + content[8:]
    elif kind == "length-past-end":
        new = (len(content) * 4).to_bytes(8, "little") + content[8:]
    elif kind == "header-json":
        label, raw = rng.choice(JSON_VALUES)
        body = raw.encode()
        new = len(body).to_bytes(8, "little") + body + rest
        kind = f"header={label}"
    else:
        new = content[: rng.randrange(len(content))]
    del header
    return f"safetensors {kind}", (new, 0o644)


# ---------------------------------------------------------------- logs


HOSTILE_NUMBERS = [
    "inf",
    "-inf",
    "nan",
    "1e999",
    "-1",
    "9" * 5000,
    "9" * 64_000,
    "1.2.3",
    "",
    "0x10",
]
RUNS = ["9", "a", " ", ".", ",", "%", ":", "(", "[", "\x1b[", "9.", "INFO 1 [", "█ ", "\x00"]


def log_case(rng: random.Random, index: int) -> Case:
    path = rng.choice(LOGS)
    lines = path.read_bytes().split(b"\n")
    stats = [
        i for i, line in enumerate(lines) if b"throughput" in line or b"accept" in line.lower()
    ]
    roll = rng.random()
    if roll < 0.35 and stats:
        at = rng.choice(stats)
        line = lines[at].decode("utf-8", "replace")
        numbers = [
            i for i, c in enumerate(line) if c.isdigit() and (i == 0 or not line[i - 1].isdigit())
        ]
        start = rng.choice(numbers) if numbers else 0
        end = start
        while end < len(line) and (line[end].isdigit() or line[end] == "."):
            end += 1
        value = rng.choice(HOSTILE_NUMBERS)
        lines[at] = (line[:start] + value + line[end:]).encode()
        mutation = f"line {at + 1} number@{start}={value[:12]}({len(value)})"
    elif roll < 0.65 and stats:
        at = rng.choice(stats)
        run = rng.choice(RUNS)
        offset = rng.randrange(len(lines[at]) + 1)
        lines[at] = lines[at][:offset] + (run * (20_000 // len(run))).encode() + lines[at][offset:]
        mutation = f"line {at + 1} run {run!r}x@{offset}"
    elif roll < 0.9:
        label, content = damage(rng, path.read_bytes())
        return _log(index, f"{path.name}: damage-{label}", content)
    else:
        kind = rng.choice(["one-huge-line", "random-bytes", "empty", "only-newlines", "nul-lines"])
        junk = {
            "one-huge-line": b"Avg prompt throughput: " * 60_000,
            "random-bytes": rng.randbytes(64 * 1024),
            "empty": b"",
            "only-newlines": b"\n" * 200_000,
            "nul-lines": b"\x00" * 1000 + b"\n" + lines[stats[0]] if stats else b"\x00",
        }[kind]
        return _log(index, f"synthetic {kind}", junk)
    return _log(index, f"{path.name}: {mutation}", b"\n".join(lines))


def _log(index: int, mutation: str, content: bytes) -> Case:
    return Case(
        family="log",
        index=index,
        mutation=mutation,
        args=("parse-log", f"{DIR}/server.log", *(["--json"] if index % 2 else [])),
        files={"server.log": (content, 0o644)},
        names=(f"{DIR}/server.log",),
        codes=frozenset({0, 2}),
    )


# ---------------------------------------------------------------- tune-offline


NUMBER_TEXTS = [
    "nan",
    "inf",
    "-inf",
    "1e999",
    "-1",
    "0",
    "",
    " ",
    "abc",
    "9" * 5000,
    "1_0",
    "0x10",
    "1e-400",
]
TUNE_VALUES: dict[str, list[str]] = {
    "--acceptance": [
        *NUMBER_TEXTS,
        "0.8,,0.6",
        ",",
        "1.5",
        "0.8;0.6",
        ",".join(["0.5"] * 10_000),
        "0.8," + "9" * 5000,
        "0.8,nan",
    ],
    "--step-cost": [
        "99999999999:0.02",
        "1:inf",
        "1:nan",
        "1:-1",
        "0:0.02",
        "-1:0.02",
        "1:1e999",
        "1:",
        ":0.02",
        "1:0.02:3",
        "1:26xs",
        "1:" + "9" * 5000,
        "9" * 5000 + ":0.02",
        "1:" + "1" * 100_000 + "x",
        "65:0.02",
        "1:0.02,1:0.03",
    ],
    "--throughput": ["1:inf", "1:nan", "1:-5", "99999999999:40", "1:0", "2:" + "9" * 5000],
    "--k-min": ["0", "-1", "65", "1e3", "nan", "9" * 5000, "15"],
    "--k-max": ["0", "-1", "65", "nan", "9" * 5000, "1"],
    "--tolerance": ["nan", "inf", "1", "-0.1", "1e999"],
    "--drafted-per-draft": ["nan", "inf", "-1", "1e999", "1e308"],
    "--draft-fraction": ["nan", "inf", "1.5", "-1", "0.5,nan", ",".join(["0.1"] * 1000)],
    "--bandwidth-gbps": ["nan", "inf", "0", "1e-300", "1e400", "-1", "1e308"],
    "--tp": ["0", "-1", "1000000000", "9" * 5000, "nan"],
    "--weights": [
        "1e999GB",
        "nan",
        "inf",
        "-1GB",
        "54XB",
        "9" * 5000 + "GB",
        "1e300GB",
        "0",
        "1" * 100_000 + "x",
    ],
    "--active-params": ["1e999", "-1", "0", "3Q", "nan", "1e308B"],
    "--extra-bytes": ["1e999GB", "-1", "nan", "9" * 400],
    "--gpu": ["", "\x00", "x" * 100_000, "H200\nB200", "\x1b[31m"],
}
TUNE_BASE = ["--acceptance", "0.8,0.6,0.4", "--step-cost", "1:0.020,2:0.022,4:0.026"]
ROOFLINE = ["--gpu", "H200", "--weights", "54GB"]


def tune_case(rng: random.Random, index: int) -> Case:
    if rng.random() < 0.15:
        data = {
            "runs": [
                {"k": 4, "output_tok_s": 40.0, "acceptance": [0.8, 0.53, 0.3]},
                {"k": 2, "step_time_s": 0.02, "acceptance_length": 2.1},
            ]
        }
        mutation, text = _json_mutation(rng, data)
        return Case(
            family="tune",
            index=index,
            mutation=f"--from runs.json: {mutation}",
            args=(
                "tune-offline",
                "--from",
                f"{DIR}/runs.json",
                "--k-max",
                "8",
                *(["--json"] if index % 2 else []),
            ),
            files={"runs.json": (text.encode(), 0o644)},
            # the file, or the option whose data it lacks ("step time measured at only one k")
            names=("runs.json", "--"),
        )
    option = rng.choice(sorted(TUNE_VALUES))
    value = rng.choice(TUNE_VALUES[option])
    args = list(TUNE_BASE) + (
        ROOFLINE
        if option in ("--tp", "--extra-bytes", "--active-params") or rng.random() < 0.3
        else []
    )
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    if rng.random() < 0.5:
        args.append("--json")
    return Case(
        family="tune",
        index=index,
        mutation=f"{option}={value[:24]!r}({len(value)})",
        args=("tune-offline", *args),
        names=("--",),  # an option: the one given a hostile value, or the one it then lacks
    )


# ---------------------------------------------------------------- report


def _bench_json() -> dict[str, object]:
    from tests.support.reports import bench_report, level_result

    report = bench_report(
        [level_result(), level_result(max_concurrency=4, output_throughput=300.0)],
        num_speculative_tokens=4,
        method="dflash",
    )
    data: dict[str, object] = json.loads(report.model_dump_json())
    return data


def report_case(rng: random.Random, index: int) -> Case:
    data = _bench_json()
    if rng.random() < 0.8:
        mutation, text = _json_mutation(rng, data)
        content = text.encode()
    else:
        label, content = damage(rng, json.dumps(data, indent=2).encode())
        mutation = f"damage-{label}"
    files = {"bench.json": (content, 0o644)}
    args = ["report", f"{DIR}/bench.json"]
    if rng.random() < 0.3:
        files["good.json"] = (json.dumps(data).encode(), 0o644)
        args = ["report", f"{DIR}/good.json", f"{DIR}/bench.json"]
    if rng.random() < 0.5:
        args.append("--json")
    return Case(
        family="report",
        index=index,
        mutation=mutation,
        args=tuple(args),
        files=files,
        names=(f"{DIR}/bench.json",),
    )


# ---------------------------------------------------------------- float options elsewhere


def option_cases(start: int) -> list[Case]:
    cases: list[Case] = []
    values = ["inf", "nan", "-inf", "1e999", "-1", "abc", ""]
    for value in values:
        cases.append(
            Case(
                "options",
                start + len(cases),
                f"launch --timeout={value!r}",
                ("launch", "ct1", "--timeout", value),
                names=("--timeout",),
                codes=frozenset({2}),
            )
        )
        cases.append(
            Case(
                "options",
                start + len(cases),
                f"bench --temperature={value!r}",
                ("bench", "--url", "http://127.0.0.1:9/v1", "--temperature", value),
                names=("--temperature",),
                codes=frozenset({2}),
            )
        )
    return cases


# ---------------------------------------------------------------- hostile paths


#: (label, path) given where a file is expected: names no file can have, files that never end
#: or block, folders; ``@DIR@/fifo`` is a named pipe in the case's folder
HOSTILE_PATHS: list[tuple[str, str]] = [
    ("long-300", "x" * 300),
    ("long-5000", "x" * 5000),
    ("deep", "a/" * 3000 + "f"),
    ("nul", "x\x00y"),
    ("control", "\x1b[31mred"),
    ("tilde-user", "~no-such-user-g20/x"),
    ("empty", ""),
    ("dot", "."),
    ("root", "/"),
    ("dev-zero", "/dev/zero"),
    ("dev-null", "/dev/null"),
    ("proc-mem", "/proc/self/mem"),
    ("fifo", f"{DIR}/fifo"),
    ("folder", DIR),
    ("dash", "-"),
    ("name-colon-long", "n:" + "x" * 5000),
    ("colons", "a:b:c"),
]
PATH_COMMANDS: list[tuple[str, tuple[str, ...]]] = [
    ("inventory", ("-i", "@P@", "inventory", "show")),
    ("playbook", ("playbook", "show", "@P@")),
    ("drafter", ("drafter", "check", "@P@")),
    ("drafter-target", ("drafter", "check", str(DRAFTER), "--target", "@P@")),
    ("drafter-ref", ("drafter", "check", str(DRAFTER), "--ref", "@P@")),
    ("drafter-registry", ("drafter", "check", str(DRAFTER), "--registry", "@P@")),
    ("parse-log", ("parse-log", "@P@")),
    ("report", ("report", "@P@")),
    ("tune-from", ("tune-offline", "--from", "@P@")),
    ("bench-workload", ("bench", "--url", "http://127.0.0.1:9/v1", "--workload", "@P@")),
    ("launch-playbook", ("-i", f"{DIR}/inv.yaml", "launch", "ct1", "-p", "@P@", "--dry-run")),
]


def path_cases() -> list[Case]:
    """Every command that reads a file, given every hostile path: one line, never a hang."""
    cases: list[Case] = []
    for command, args in PATH_COMMANDS:
        for label, path in HOSTILE_PATHS:
            option = next((a for a in args[: args.index("@P@")] if a.startswith("-")), None)
            # the path as the error escapes it, or what follows NAME: (drafter's NAME:PATH)
            shown = [printable(part)[:20] for part in {path, path.partition(":")[2]} if part]
            cases.append(
                Case(
                    family="paths",
                    index=len(cases),
                    mutation=f"{command} {label}",
                    args=tuple(path if a == "@P@" else a for a in args),
                    files={"inv.yaml": (INVENTORY_BASES["small"].encode(), 0o600)},
                    fifos=("fifo",),
                    # the path (as the error escapes it) or the option that took it
                    names=tuple(n for n in (*shown, option, "FILE", "''") if n),
                )
            )
    return cases


# ---------------------------------------------------------------- the corpus


FAMILIES: dict[str, tuple[Family, int]] = {
    "inventory": (inventory_case, 400),
    "playbook": (playbook_case, 300),
    "set": (set_case, 300),
    "drafter": (drafter_case, 200),
    "log": (log_case, 250),
    "tune": (tune_case, 250),
    "report": (report_case, 150),
}


def corpus() -> list[Case]:
    """Every case, the same on every run."""
    cases: list[Case] = []
    for family, (make, count) in FAMILIES.items():
        rng = random.Random(f"{SEED}-{family}")
        cases.extend(make(rng, index) for index in range(count))
    cases.extend(option_cases(0))
    cases.extend(path_cases())
    return cases
