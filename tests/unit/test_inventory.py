"""Inventory loading: merge order, one-line file:line:key errors, secrets never inline."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflashops.errors import InventoryError, UnknownNameError
from dflashops.inventory.load import load_inventory

REPO = Path(__file__).resolve().parents[2]

BASE = """\
version: 1
clusters:
  c1:
    api_url: https://127.0.0.1:8006
    auth:
      user: root@pam
      password: {env: TEST_PVE_PASSWORD}
    nodes:
      n1:
        ssh: {host: 127.0.0.1}
defaults:
  cores: 2
  memory_mb: 1024
groups:
  big:
    vars:
      cores: 16
      network: {bridge: vmbr1}
containers:
  ct1:
    groups: [big]
    memory_mb: 4096
    network: {ip: 10.200.0.10/24}
  ct2: {}
"""


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_example_inventory_validates() -> None:
    inv = load_inventory(REPO / "inventory" / "example.yaml")
    ct = inv.container("qwen36")
    assert ct.vmid == 129
    assert ct.gpus == [0, 1]
    assert ct.network.address == "10.1.230.172"
    assert ct.cores == 16  # from the group
    assert ct.nvidia_driver == "install"
    assert inv.pve_node_name(ct) == "pve"
    assert inv.node_of(ct).ssh.host == "10.1.2.5"


def test_merge_order_defaults_group_container_set(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, BASE), ["ct1.cores=32"])
    ct1, ct2 = inv.container("ct1"), inv.container("ct2")
    assert ct1.cores == 32  # --set beats group
    assert ct1.memory_mb == 4096  # container beats defaults
    # nested mappings merge key by key: bridge from the group, ip from the container
    assert (ct1.network.bridge, ct1.network.ip) == ("vmbr1", "10.200.0.10/24")
    assert (ct2.cores, ct2.memory_mb, ct2.network.ip) == (2, 1024, "dhcp")
    assert (ct1.cluster, ct1.node) == ("c1", "n1")  # the only choices


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: t.replace("  ct2: {}", "  ct2: {cors: 4}"),
            r":24:containers\.ct2\.cors: unknown key",
        ),
        (
            lambda t: t.replace("memory_mb: 4096", "memory_mb: lots"),
            r":22:containers\.ct1\.memory_mb: .*integer",
        ),
        (
            lambda t: t.replace("cores: 16", "cores: 0"),
            r":17:groups\.big\.vars\.cores: .*greater than or equal to 1",
        ),
        (
            lambda t: t.replace("ip: 10.200.0.10/24", "ip: 10.200.0.999/24"),
            r":23:containers\.ct1\.network\.ip: ip must be dhcp",
        ),
        (
            lambda t: t.replace("password: {env: TEST_PVE_PASSWORD}", "password: hunter2"),
            r":7:clusters\.c1\.auth\..*never written inline",
        ),
        (
            lambda t: t.replace("groups: [big]", "groups: [small]"),
            r":21:containers\.ct1\.groups: unknown group 'small'",
        ),
        (lambda t: t.replace("  ct2: {}", "  ct1: {}"), r":24:containers\.ct1: duplicate key"),
        (
            lambda t: t.replace(
                "api_url: https://127.0.0.1:8006", "api_url: http://127.0.0.1:8006"
            ),
            r":4:clusters\.c1\.api_url: .*https",
        ),
        (lambda t: t.replace("  ct2: {}", "  ct2: [1"), r":25: invalid YAML"),
    ],
)
def test_errors_name_file_line_key(tmp_path: Path, edit, expected: str) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, edit(BASE))
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    line = info.value.one_line()
    assert "\n" not in line
    assert line.startswith(str(path))
    assert re.search(expected, line), line
    assert "hunter2" not in line


def test_nvidia_driver_defaults_to_install_and_merges_like_any_key(tmp_path: Path) -> None:
    assert load_inventory(write(tmp_path, BASE)).container("ct2").nvidia_driver == "install"
    text = BASE.replace("  memory_mb: 1024\n", "  memory_mb: 1024\n  nvidia_driver: skip\n")
    text = text.replace(
        "      cores: 16\n", "      cores: 16\n      nvidia_driver: expect-present\n"
    )
    inv = load_inventory(write(tmp_path, text, "modes.yaml"))
    assert inv.container("ct2").nvidia_driver == "skip"  # from defaults
    assert inv.container("ct1").nvidia_driver == "expect-present"  # the group beats defaults
    wrong = write(tmp_path, BASE.replace("  ct2: {}", "  ct2: {nvidia_driver: yes}"), "bad.yaml")
    with pytest.raises(InventoryError, match=r"containers\.ct2\.nvidia_driver: .*'install'"):
        load_inventory(wrong)


def test_missing_secret_names_location_not_value(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, BASE))
    with pytest.raises(
        InventoryError,
        match=r"inv\.yaml:7:clusters\.c1\.auth\.password: environment variable TEST_PVE_PASSWORD",
    ):
        inv.check_secrets(environ={})
    assert inv.secret("c1", environ={"TEST_PVE_PASSWORD": "s3cret"}) == "s3cret"
    assert "s3cret" not in repr(inv.redacted())


def test_secret_from_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    secret.chmod(0o600)
    text = BASE.replace("{env: TEST_PVE_PASSWORD}", f"{{file: {secret}}}")
    inv = load_inventory(write(tmp_path, text))
    assert inv.secret("c1") == "from-file"
    missing = BASE.replace("{env: TEST_PVE_PASSWORD}", f"{{file: {tmp_path / 'nope'}}}")
    with pytest.raises(InventoryError, match="cannot be read"):
        load_inventory(write(tmp_path, missing, "b.yaml")).check_secrets()


def test_set_errors_blame_set(tmp_path: Path) -> None:
    path = write(tmp_path, BASE)
    with pytest.raises(InventoryError, match=r"^--set:ct1\.cores: .*greater than or equal to 1"):
        load_inventory(path, ["ct1.cores=0"])
    with pytest.raises(InventoryError, match=r"^--set:nope\.cores"):
        load_inventory(path, ["nope.cores=4"])


def test_unknown_container_lists_known(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, BASE))
    with pytest.raises(UnknownNameError, match="defined: ct1, ct2"):
        inv.container("ct9")


def test_several_clusters_need_explicit_cluster(tmp_path: Path) -> None:
    data = yaml.safe_load(BASE)
    data["clusters"]["c2"] = data["clusters"]["c1"]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InventoryError, match="cluster is required"):
        load_inventory(path)


# --- property test: any document gives an inventory or one line naming the file, never a traceback

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
container_keys = st.sampled_from(
    [
        "vmid",
        "cores",
        "memory_mb",
        "network",
        "gpus",
        "mounts",
        "ssh",
        "groups",
        "template",
        "rootfs_gb",
        "unprivileged",
        "bogus",
    ]
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, object]:
    doc: dict[str, Any] = yaml.safe_load(BASE)
    ct = draw(st.dictionaries(container_keys, values, max_size=4))
    doc["containers"]["gen"] = ct
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["defaults", "groups", "clusters", "extra"]))] = draw(values)
    return doc


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=documents())
def test_generated_documents_never_traceback(tmp_path: Path, doc: dict[str, object]) -> None:
    path = tmp_path / "gen.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        inv = load_inventory(path)
    except InventoryError as exc:
        line = exc.one_line()
        assert "\n" not in line
        assert line.startswith(str(path))
    else:
        assert "gen" in inv.containers


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_tracebacks(tmp_path: Path, text: str) -> None:
    path = tmp_path / "junk.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.one_line().startswith(str(path))
