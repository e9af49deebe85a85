"""Security defaults that must not be silent (issue 20): unchecked TLS warns, contradictory or
credential-carrying API settings are refused, literal secrets never reach the launch files and
are never echoed, PVE property strings cannot be extended, non-finite numbers are refused."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.errors import InventoryError, PlaybookError
from dflashops.inventory.load import load_inventory
from dflashops.playbook.load import load_playbook
from dflashops.secrets import INLINE_REFUSED
from tests.support.inventories import write_inventory

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "playbooks" / "qwen3.6-27b-dflash.yaml"
SECRET = "Zq9-literal-s3cret"


def inventory_error(path: Path) -> str:
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    return caught.value.one_line()


# ---------------------------------------------------------------- TLS and the API URL


def test_verify_tls_false_warns_on_stderr_every_run(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a closed port: login fails at once, after the warning
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inv = write_inventory(tmp_path, "verify_tls: false", api_url=f"https://127.0.0.1:{port}")
    for _ in range(2):  # every run, not once per process
        result = CliRunner().invoke(cli, ["-i", str(inv), "status"], env={"G_PVE_PW": "pw"})
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert warnings == [
            "warning: verify_tls is false for 127.0.0.1: the PVE password is sent without "
            "checking the server's certificate (set ca_file instead)"
        ]
        assert result.exit_code == 1


def test_ca_file_with_verify_tls_false_is_refused(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, "verify_tls: false\nca_file: /etc/pve-ca.pem")
    assert "ca_file with verify_tls: false is contradictory" in inventory_error(inv)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"https://root:{SECRET}@127.0.0.1:8006", "must not carry user:password@"),
        ("https://127.0.0.1:0", "port 0 is not a port"),
    ],
    ids=["credentials", "port-0"],
)
def test_bad_api_url_is_refused(tmp_path: Path, url: str, reason: str) -> None:
    line = inventory_error(write_inventory(tmp_path, api_url=url))
    assert ":4:clusters.c1.api_url:" in line
    assert reason in line
    assert SECRET not in line


# ---------------------------------------------------------------- inline secrets


@pytest.mark.parametrize(
    "value",
    [f"[{SECRET}]", f"!!binary {__import__('base64').b64encode(SECRET.encode()).decode()}", "7"],
    ids=["list", "bytes", "number"],
)
def test_inline_secret_of_any_type_is_refused_never_echoed(tmp_path: Path, value: str) -> None:
    result = CliRunner().invoke(
        cli, ["-i", str(write_inventory(tmp_path, password=value)), "inventory", "show"]
    )
    assert result.exit_code == 2
    assert f"clusters.c1.auth.password: {INLINE_REFUSED}" in result.stderr
    assert SECRET not in result.output


def test_env_name_error_names_its_key_once_and_not_the_value(tmp_path: Path) -> None:
    line = inventory_error(write_inventory(tmp_path, password=f"{{env: '{SECRET}'}}"))
    assert ":6:clusters.c1.auth.password: env must be a variable name" in line
    assert "password.password" not in line
    assert SECRET not in line


@pytest.mark.parametrize(
    "override",
    [
        f"server.env.VLLM_API_KEY={SECRET}",
        f"server.env.HF_TOKEN={SECRET}",
        f"server.env.aws_secret_access_key={SECRET}",
        f"server.env.DB_PASSWORD={SECRET}",
        f"server.extra_args=[--api-key, {SECRET}]",
        f"server.extra_args=[--hf-token={SECRET}]",
    ],
)
def test_literal_secret_in_server_env_or_args_is_refused(override: str) -> None:
    with pytest.raises(PlaybookError) as caught:
        load_playbook(REFERENCE, [override])
    line = caught.value.one_line()
    assert INLINE_REFUSED in line
    assert "server.api_key_env" in line
    assert SECRET not in line


def test_literal_secret_in_playbook_file_names_line(tmp_path: Path) -> None:
    text = REFERENCE.read_text().replace(
        "  extra_args:", f"  env:\n    VLLM_API_KEY: {SECRET}\n  extra_args:", 1
    )
    path = tmp_path / "p.yaml"
    path.write_text(text)
    line_no = text.splitlines().index("  env:") + 1
    with pytest.raises(PlaybookError) as caught:
        load_playbook(path)
    line = caught.value.one_line()
    assert f"{path}:{line_no}" in line and "server.env" in line
    assert SECRET not in line


@pytest.mark.parametrize(
    "override",
    [
        "server.env.TOKENIZERS_PARALLELISM=false",
        "server.env.VLLM_CPU_KVCACHE_SPACE=4",
        "server.extra_args=[--max-num-batched-tokens, '8192', --tokenizer, /m]",
    ],
)
def test_settings_that_only_look_like_secrets_are_kept(override: str) -> None:
    server = load_playbook(REFERENCE, [override]).server
    key, _, value = override.partition("=")
    if key.startswith("server.env."):
        assert server.env[key.removeprefix("server.env.")] in (value, "0")  # a YAML false: "0"
    else:
        assert server.extra_args[:2] == ["--max-num-batched-tokens", "8192"]


# ---------------------------------------------------------------- PVE property strings


@pytest.mark.parametrize(
    ("container", "key"),
    [
        ("{network: {bridge: 'vmbr0,firewall=1'}}", "containers.ct1.network.bridge"),
        ("{network: {bridge: 'vmbr0=x'}}", "containers.ct1.network.bridge"),
        ("{mounts: [{host_path: '/m,mp=/etc', path: /m}]}", "containers.ct1.mounts[0].host_path"),
        ("{mounts: [{host_path: /m, path: '/m,ro=0'}]}", "containers.ct1.mounts[0].path"),
        ("{mounts: [{host_path: /m, path: '/m=1'}]}", "containers.ct1.mounts[0].path"),
        ("{storage: 'local-lvm,size=1'}", "containers.ct1.storage"),
        ("{nameserver: '1.1.1.1,searchdomain=x'}", "containers.ct1.nameserver"),
    ],
)
def test_property_string_syntax_in_values_is_refused(
    tmp_path: Path, container: str, key: str
) -> None:
    line = inventory_error(write_inventory(tmp_path, container=container))
    assert f":{key}:" in line


def test_plain_property_values_still_load(tmp_path: Path) -> None:
    inv = load_inventory(
        write_inventory(
            tmp_path,
            container="{network: {bridge: vmbr0.100}, storage: local-zfs, "
            "nameserver: '1.1.1.1 2001:db8::1', mounts: [{host_path: /tank/m, path: /models}]}",
        )
    )
    assert inv.containers["ct1"].network.bridge == "vmbr0.100"


# ---------------------------------------------------------------- non-finite numbers


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_inventory_number_names_file_line_key(tmp_path: Path, value: str) -> None:
    inv = write_inventory(tmp_path)
    inv.write_text(inv.read_text().replace("timeout_s: 2", f"timeout_s: {value}"))
    line = inventory_error(inv)
    assert line.startswith(f"{inv}:5:clusters.c1.timeout_s:")
    assert "finite" in line


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_playbook_number_is_refused(value: str) -> None:
    with pytest.raises(PlaybookError, match=r"^--set:server\.gpu_memory_utilization: .*finite"):
        load_playbook(REFERENCE, [f"server.gpu_memory_utilization={value}"])


# ---------------------------------------------------------------- values under secret keys


def test_wrong_type_inside_a_secret_reference_is_not_echoed(tmp_path: Path) -> None:
    line = inventory_error(write_inventory(tmp_path, password=f"{{file: [{SECRET}]}}"))
    assert ":6:clusters.c1.auth.password.file:" in line
    assert SECRET not in line


@pytest.mark.parametrize(
    "override",
    [
        f"server.env.HF_TOKEN=[{SECRET}]",
        f"server.env.PLAIN_NAME=[{SECRET}]",  # an env value is never echoed, whatever its name
        f"server.extra_args=[--api-key, [{SECRET}]]",
    ],
)
def test_wrong_type_under_env_or_extra_args_is_not_echoed(override: str) -> None:
    with pytest.raises(PlaybookError) as caught:
        load_playbook(REFERENCE, [override])
    line = caught.value.one_line()
    assert line.startswith("--set:server.")
    assert SECRET not in line


def test_other_wrong_values_are_still_shown() -> None:
    with pytest.raises(PlaybookError, match=r"\(got \[1, 2\]\)"):
        load_playbook(REFERENCE, ["server.port=[1, 2]"])
