"""The PVE double's schema validation, formats, property strings and config files."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflashops.lab.pve import conffile
from dflashops.lab.pve.apischema import ApiSchema
from dflashops.lab.pve.errors import ApiError
from dflashops.lab.pve.formats import (
    FormatError,
    check_named_format,
    format_size,
    parse_size,
    split_list,
)
from dflashops.lab.pve.lxcconfig import unique_tags
from dflashops.lab.pve.validate import (
    NOT_IN_SCHEMA,
    parse_property_string,
    perl_regex,
    print_property_string,
    validate_params,
)

CREATE = ("/nodes/{node}/lxc", "POST")
PUT_CONFIG = ("/nodes/{node}/lxc/{vmid}/config", "PUT")
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"


@pytest.fixture(scope="module")
def schema() -> ApiSchema:
    return ApiSchema.load()


def errors_of(schema: ApiSchema, endpoint: tuple[str, str], **params: str) -> dict[str, str]:
    with pytest.raises(ApiError) as caught:
        validate_params(schema.parameters(*endpoint), params)
    assert caught.value.status == 400
    assert caught.value.message == "Parameter verification failed."
    return caught.value.errors


def create_params(**extra: str) -> dict[str, str]:
    return {"node": "lab", "vmid": "129", "ostemplate": TEMPLATE, **extra}


def net_format(schema: ApiSchema) -> dict[str, Any]:
    fmt: dict[str, Any] = schema.parameters(*CREATE)["properties"]["net[n]"]["format"]
    return fmt


# --------------------------------------------------------------------------- schema data


def test_shipped_schema_has_every_endpoint_the_double_serves(schema: ApiSchema) -> None:
    needed = {
        ("/access/ticket", "POST"),
        ("/version", "GET"),
        ("/cluster/nextid", "GET"),
        ("/cluster/resources", "GET"),
        ("/nodes/{node}/lxc", "POST"),
        ("/nodes/{node}/lxc/{vmid}/config", "PUT"),
        ("/nodes/{node}/lxc/{vmid}/interfaces", "GET"),
        ("/nodes/{node}/tasks/{upid}/status", "GET"),
        ("/nodes/{node}/tasks/{upid}/log", "GET"),
        ("/nodes/{node}/storage/{storage}/content", "GET"),
        ("/nodes/{node}/aplinfo", "POST"),
    }
    assert {pair for pair in needed if schema.method(*pair) is None} == set()
    login = schema.parameters("/access/ticket", "POST")["properties"]
    assert not login["username"].get("optional") and not login["password"].get("optional")


def test_every_schema_pattern_compiles_as_python_regex(schema: ApiSchema) -> None:
    patterns: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema.paths)
    assert len(patterns) > 10
    for pattern in patterns:
        perl_regex(pattern)
    mount_options = perl_regex(
        schema.parameters(*CREATE)["properties"]["rootfs"]["format"]["mountoptions"]["pattern"]
    )
    assert mount_options.fullmatch("noatime;nodev")
    assert not mount_options.fullmatch("noatime;bogus")


def test_path_templates_match_with_literals_before_placeholders(schema: ApiSchema) -> None:
    match = schema.match("/nodes/lab/lxc/129/status/current")
    assert match is not None
    assert match.template == "/nodes/{node}/lxc/{vmid}/status/current"
    assert match.params == {"node": "lab", "vmid": "129"}
    upid = "UPID:lab:00001000:01001000:6B102BC2:vzcreate:129:root@pam!tok:"
    task = schema.match(f"/nodes/lab/tasks/{upid}/status")
    assert task is not None and task.params["upid"] == upid
    assert schema.match("/nodes/lab/qemu") is None
    assert schema.match("/nodes//lxc") is None


# --------------------------------------------------------------------------- parameters


def test_valid_create_call_is_accepted_and_typed(schema: ApiSchema) -> None:
    params = create_params(
        hostname="lab-ct1",
        memory="4096",
        cores="2",
        cpulimit="1.5",
        onboot="1",
        net0="name=eth0,bridge=vmbr0,ip=10.200.0.10/24,gw=10.200.0.1",
        net31="name=eth31,ip=dhcp",
        rootfs="local-lvm:32",
        mp0="local-lvm:8,mp=/srv/models,backup=1",
        dev0="/dev/nvidia0,mode=0666,gid=44",
        dev1="path=/dev/nvidia-uvm,deny-write=0",
        features="nesting=1,keyctl=1",
        tags="dflashops;gpu",
    )
    typed = validate_params(schema.parameters(*CREATE), params)
    assert typed["vmid"] == 129 and typed["memory"] == 4096 and typed["onboot"] == 1
    assert typed["cpulimit"] == 1.5
    assert typed["net0"] == params["net0"]


def test_unknown_parameter_gets_pve_message(schema: ApiSchema) -> None:
    errors = errors_of(schema, CREATE, **create_params(bogus="1", lxc="lxc.foo: 1"))
    assert errors == {"bogus": NOT_IN_SCHEMA, "lxc": NOT_IN_SCHEMA}


def test_indexed_keys_accept_the_range_pve_registers(schema: ApiSchema) -> None:
    errors = errors_of(
        schema,
        CREATE,
        **create_params(net32="name=eth0", mp256="local-lvm:1,mp=/x", net01="name=eth0"),
    )
    assert set(errors) == {"net32", "mp256", "net01"}
    assert all(message == NOT_IN_SCHEMA for message in errors.values())


def test_missing_required_parameter(schema: ApiSchema) -> None:
    errors = errors_of(schema, CREATE, node="lab", vmid="129")
    assert errors == {"ostemplate": "property is missing and it is not optional"}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("vmid", "99", "invalid format - value does not look like a valid VM ID"),
        ("vmid", "abc", "type check ('integer') failed - got 'abc'"),
        ("memory", "8", "value must have a minimum value of 16"),
        ("cores", "8193", "value must have a maximum value of 8192"),
        ("onboot", "true", "type check ('boolean') failed - got 'true'"),
        ("arch", "sparc", "value 'sparc' does not have a value in the enumeration"),
        ("hostname", "bad_name", "invalid format - value does not look like a valid DNS name"),
        ("tags", "gpu/a6000", "invalid format - invalid characters in tag"),
        ("password", "1234", "value must be at least 5 characters long"),
        ("node", "-lab", "value does not look like a valid node name"),
        ("storage", "local lvm", "storage ID 'local lvm' contains illegal characters"),
        ("hookscript", "nocolon", "unable to parse volume ID 'nocolon'"),
    ],
)
def test_scalar_checks(schema: ApiSchema, key: str, value: str, message: str) -> None:
    errors = errors_of(schema, CREATE, **create_params(**{key: value}))
    assert list(errors) == [key]
    assert message in errors[key]


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("net0", "name=eth0,ip=300.1.1.1/24", "net0.ip: invalid format - value does not look"),
        ("net0", "name=eth0,ip=10.0.0.1", "valid ipv4 network configuration"),
        ("net0", "bridge=vmbr0,ip=dhcp", "net0.name: property is missing and it is not optional"),
        ("net0", "name=eth0,hwaddr=01:00:00:00:00:01", "valid unicast MAC address"),
        ("net0", "name=eth0,mtu=10", "net0.mtu: value must have a minimum value of 64"),
        ("net0", "name=eth0,foo=1", "invalid key in comma-separated list property: foo"),
        ("net0", "name=eth0,name=eth1", "duplicate key in comma-separated list property: name"),
        ("rootfs", "local-lvm:8,bogus=1", "invalid key in comma-separated list property: bogus"),
        ("rootfs", "local-lvm:8,size=abc", "value does not look like a valid disk size: abc"),
        ("rootfs", "local-lvm:8,mountoptions=sync", "value does not match the regex pattern"),
        ("rootfs", "../etc", "../etc contains illegal character sequences"),
        ("mp0", "local-lvm:8", "mp0.mp: property is missing and it is not optional"),
        ("dev0", "/tmp/x", "/tmp/x is not a valid device path"),
        ("dev0", "/dev/nvidia0,mode=666", "dev0.mode: value does not match the regex pattern"),
        ("dev0", "/dev/nvidia0,/dev/nvidia1", "duplicate key in comma-separated list property"),
        ("features", "nesting=maybe", "type check ('boolean') failed - got 'maybe'"),
        ("startup", "order=x", "unable to parse startup options"),
    ],
)
def test_property_string_checks(schema: ApiSchema, key: str, value: str, fragment: str) -> None:
    errors = errors_of(schema, CREATE, **create_params(**{key: value}))
    assert list(errors) == [key]
    assert errors[key].startswith("invalid format - ")
    assert fragment in errors[key]


def test_requires_names_the_missing_property(schema: ApiSchema) -> None:
    errors = errors_of(schema, CREATE, **create_params(unique="1"))
    assert errors == {"restore": "missing property - 'unique' requires this property"}


def test_config_put_delete_and_digest_are_checked(schema: ApiSchema) -> None:
    params = {"node": "lab", "vmid": "129", "delete": "dev0,net1", "digest": "a" * 40}
    assert validate_params(schema.parameters(*PUT_CONFIG), params)["delete"] == "dev0,net1"
    errors = errors_of(schema, PUT_CONFIG, node="lab", vmid="129", delete="dev0,0bad")
    assert "invalid configuration ID '0bad'" in errors["delete"]
    errors = errors_of(schema, PUT_CONFIG, node="lab", vmid="129", digest="a" * 41)
    assert errors == {"digest": "value may only be 40 characters long"}


# --------------------------------------------------------------------------- formats


def test_split_list_like_pve_tools() -> None:
    assert split_list(" a, b;c  d ") == ["a", "b", "c", "d"]
    assert split_list("a b\0c") == ["a b", "c"]
    assert split_list("") == []


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("pve-tag-list", "dflashops gpu;a6000,x.y+z", "gpu/a6000"),
        ("pve-ipv4-config", "10.0.0.1/24", "10.0.0.1/7"),
        ("pve-ipv6-config", "auto", "fe80::1"),
        ("ipv6", "fe80::1", "fe80::1%eth0"),
        ("lxc-ip-with-ll-iface-list", "1.1.1.1 fe80::1%eth0", "fe80::1%0"),
        ("mac-addr", "BC:24:11:00:00:01", "BD:24:11:00:00:01"),
        ("disk-size", "1.5G", "1.5GB"),
        ("pve-volume-id", "local-lvm:vm-100-disk-0", "x:"),
        ("pve-lxc-dev-string", "/dev/nvidia-caps/nvidia-cap1", "/dev/../etc/shadow"),
        ("dns-name-list", "example.com lab.local", "-bad.example"),
        ("pve-ct-timezone", "Europe/Berlin", "Mars/Olympus"),
        ("pve-storage-content", "vztmpl", "templates"),
    ],
)
def test_named_formats(fmt: str, good: str, bad: str) -> None:
    check_named_format(fmt, good)
    with pytest.raises(FormatError):
        check_named_format(fmt, bad)


def test_sizes_round_trip_like_pve() -> None:
    assert parse_size("8G") == 8 << 30
    assert parse_size("1.5K") == 1536
    assert parse_size("8GB") is None
    assert [format_size(v) for v in (8 << 30, 1536, 1 << 20, 5)] == ["8G", "1536", "1M", "5"]


# --------------------------------------------------------------------------- property strings


def test_property_string_print_order_matches_pve(schema: ApiSchema) -> None:
    net = parse_property_string(net_format(schema), "ip=dhcp,bridge=vmbr0,name=eth0,firewall=yes")
    assert net["firewall"] == "1"  # booleans normalise inside property strings
    # name is required, so it comes first, then the optional keys sorted
    assert (
        print_property_string(net, net_format(schema))
        == "name=eth0,bridge=vmbr0,firewall=1,ip=dhcp"
    )
    dev_format = schema.parameters(*CREATE)["properties"]["dev[n]"]["format"]
    dev = parse_property_string(dev_format, "mode=0666,path=/dev/nvidia0")
    assert print_property_string(dev, dev_format) == "/dev/nvidia0,mode=0666"


@given(
    ip=st.ip_addresses(v=4).map(str),
    prefix=st.integers(min_value=8, max_value=32),
    mtu=st.integers(min_value=64, max_value=65535),
    tag=st.integers(min_value=1, max_value=4094),
)
def test_network_property_strings_round_trip(ip: str, prefix: int, mtu: int, tag: int) -> None:
    fmt = net_format(ApiSchema.load())
    text = f"tag={tag},ip={ip}/{prefix},mtu={mtu},name=eth0"
    parsed = parse_property_string(fmt, text)
    printed = print_property_string(parsed, fmt)
    assert printed.startswith("name=eth0,")
    assert parse_property_string(fmt, printed) == parsed


def test_unique_tags_sorts_lowercases_and_dedups() -> None:
    assert unique_tags("GPU dflashops;gpu,b") == "b;dflashops;gpu"


# --------------------------------------------------------------------------- config files


RAW_CONFIG = b"""#GPU box%3A two A6000
#second line
arch: amd64
hostname: lab-ct1
memory: 4096
onboot: yes
rootfs: local-lvm:vm-129-disk-0,size=32G
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.bogus.key: 1

[pve:pending]
cores: 4
delete: swap

[before-gpu]
arch: amd64
memory: 2048
"""


def test_config_file_parse_keeps_pve_semantics() -> None:
    conf = conffile.parse(RAW_CONFIG, 129, booleans=frozenset({"onboot"}))
    assert conf.digest == hashlib.sha1(RAW_CONFIG).hexdigest()
    assert conf.main.values["description"] == "GPU box: two A6000\nsecond line\n"
    assert conf.main.values["onboot"] == "1"
    assert conf.main.lxc == [
        ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
        ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
    ]
    assert conf.warnings == ["vm 129 - unable to parse config: lxc.bogus.key: 1"]
    assert conf.pending.values == {"cores": "4", "delete": "swap"}
    assert conf.snapshots["before-gpu"].values == {"arch": "amd64", "memory": "2048"}


def test_config_file_render_is_what_pve_writes() -> None:
    conf = conffile.parse(RAW_CONFIG, 129, booleans=frozenset({"onboot"}))
    text = conffile.render(conf).decode()
    assert text.startswith("#GPU box%3A two A6000\n#second line\narch: amd64\n")
    main = text.split("\n\n")[0].splitlines()
    assert main[-2:] == [
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
    ]
    assert "\n[pve:pending]\ncores: 4\ndelete: swap\n" in text
    assert text.endswith("\n[before-gpu]\narch: amd64\nmemory: 2048\n")
    again = conffile.parse(text.encode(), 129)
    assert again.main.values == conf.main.values and again.main.lxc == conf.main.lxc
