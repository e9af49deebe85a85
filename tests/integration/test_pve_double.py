"""The PVE double through real proxmoxer over real, verified HTTPS on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from proxmoxer import AuthenticationError, ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks

from dflashops.lab.pve import PveDouble, serve_double

pytestmark = pytest.mark.timeout(120)

TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJKx0z2lW0WuSXzSv6MZyB6H0C1Nfu7S7P4b7kM4B4Hb lab"
NOT_IN_SCHEMA = (
    "property is not defined in schema and the schema does not allow additional properties"
)
DEV_ROOT_ONLY = (
    "Permission check failed (configuring device passthrough is only allowed for root@pam)"
)


@pytest.fixture
def double(tmp_path: Path) -> Iterator[PveDouble]:
    users = {"root@pam": "lab-root-pw", "ops@pve": "ops-password"}
    tokens = {"root@pam!dflashops": "0f5c8e2a-token", "ops@pve!ci": "ci-token-secret"}
    with serve_double(
        tmp_path / "pve", users=users, tokens=tokens, create_delay=0.6, task_delay=0.02
    ) as running:
        yield running


@pytest.fixture
def prox(double: PveDouble) -> Any:
    return double.client()


def wait(prox: Any, upid: str) -> dict[str, Any]:
    status: dict[str, Any] | None = Tasks.blocking_status(
        prox, upid, timeout=30, polling_interval=0.05
    )
    assert status is not None, f"task {upid} still running"
    return status


def create(prox: Any, vmid: int, **params: Any) -> str:
    params.setdefault("ostemplate", TEMPLATE)
    params.setdefault("rootfs", "local-lvm:8")
    upid: str = prox.nodes("lab").lxc.post(vmid=vmid, **params)
    return upid


def created(prox: Any, vmid: int, **params: Any) -> dict[str, Any]:
    status = wait(prox, create(prox, vmid, **params))
    assert status["exitstatus"] == "OK"
    return status


def refused(call: Any, *args: Any, **kwargs: Any) -> ResourceException:
    with pytest.raises(ResourceException) as caught:
        call(*args, **kwargs)
    return caught.value


# --------------------------------------------------------------------------- transport and auth


def test_tls_is_verified_against_the_double_ca(double: PveDouble) -> None:
    assert double.client().version.get()["release"] == "9.1"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{double.api_url}/version", timeout=10)  # system CAs do not know it
    answer = requests.get(f"{double.api_url}/version", verify=str(double.ca_path), timeout=10)
    assert answer.status_code == 401 and answer.reason == "No ticket"


def test_wrong_password_and_wrong_token_are_refused(double: PveDouble) -> None:
    with pytest.raises(AuthenticationError):
        ProxmoxAPI("127.0.0.1", port=double.port, user="root@pam", password="nope",
                   verify_ssl=str(double.ca_path))  # fmt: skip
    bad_token = ProxmoxAPI(
        "127.0.0.1", port=double.port, user="root@pam", token_name="dflashops",
        token_value="wrong", verify_ssl=str(double.ca_path),
    )  # fmt: skip
    error = refused(bad_token.nodes.get)
    assert (error.status_code, error.content) == (401, "authentication failure")


def test_ticket_writes_need_the_csrf_token(double: PveDouble) -> None:
    ca = str(double.ca_path)
    login = requests.post(
        f"{double.api_url}/access/ticket",
        data={"username": "root@pam", "password": "lab-root-pw"},
        verify=ca,
        timeout=10,
    ).json()["data"]
    cookies = {"PVEAuthCookie": login["ticket"]}
    url = f"{double.api_url}/nodes/lab/lxc"
    assert requests.get(url, cookies=cookies, verify=ca, timeout=10).json() == {"data": []}
    no_csrf = requests.post(url, cookies=cookies, data={"vmid": 130}, verify=ca, timeout=10)
    assert (no_csrf.status_code, no_csrf.reason) == (401, "Permission denied - invalid csrf token")
    headers = {"CSRFPreventionToken": login["CSRFPreventionToken"]}
    with_csrf = requests.post(
        url, cookies=cookies, headers=headers, data={"vmid": 130}, verify=ca, timeout=10
    )
    assert with_csrf.status_code == 400  # authenticated: now the missing ostemplate counts


def test_token_and_password_callers_show_in_tasks(double: PveDouble, prox: Any) -> None:
    token = double.client(token="dflashops")
    status = created(token, 131)
    assert status["user"] == "root@pam" and status["tokenid"] == "dflashops"
    decoded = Tasks.decode_upid(status["upid"])
    assert (decoded["node"], decoded["type"], decoded["id"], decoded["user"]) == (
        "lab", "vzcreate", "131", "root@pam",
    )  # fmt: skip
    assert decoded["pid"] == status["pid"] and decoded["starttime"] == status["starttime"]
    assert ":root@pam!dflashops:" in status["upid"]
    password_status = created(prox, 132)
    assert "tokenid" not in password_status
    assert password_status["upid"].endswith(":root@pam:")


# --------------------------------------------------------------------------- schema checks


def test_unknown_parameter_is_a_400_with_per_parameter_errors(double: PveDouble, prox: Any) -> None:
    error = refused(create, prox, 140, bogus=1)
    assert (error.status_code, error.content) == (400, "Parameter verification failed.")
    assert error.errors == {"bogus": NOT_IN_SCHEMA}
    session = double.client()._store["session"]
    raw = session.put(f"{double.api_url}/nodes/lab/lxc/140/config", data={"lxc": "x"})
    assert raw.json() == {"data": None, "errors": {"lxc": NOT_IN_SCHEMA}}


@pytest.mark.parametrize(
    ("params", "key", "fragment"),
    [
        ({"net0": "name=eth0,ip=300.1.1.1/24"}, "net0", "valid ipv4 network configuration"),
        ({"net0": "bridge=vmbr0"}, "net0", "net0.name: property is missing"),
        ({"rootfs": "local-lvm:8,bogus=1"}, "rootfs", "invalid key in comma-separated list"),
        ({"tags": "gpu/a6000"}, "tags", "invalid characters in tag"),
        ({"hostname": "lab_ct"}, "hostname", "valid DNS name"),
        ({"memory": 8}, "memory", "minimum value of 16"),
        ({"onboot": "true"}, "onboot", "type check ('boolean') failed - got 'true'"),
        ({"dev0": "/etc/shadow"}, "dev0", "is not a valid device path"),
        ({"net32": "name=eth32"}, "net32", NOT_IN_SCHEMA),
    ],
)
def test_bad_values_are_refused_like_pve(
    prox: Any, params: dict[str, Any], key: str, fragment: str
) -> None:
    error = refused(create, prox, 141, **params)
    assert error.status_code == 400
    assert list(error.errors) == [key]
    assert fragment in error.errors[key]
    assert prox.nodes("lab").lxc.get() == []


def test_missing_ostemplate_is_refused(prox: Any) -> None:
    error = refused(prox.nodes("lab").lxc.post, vmid=142, rootfs="local-lvm:8")
    assert error.errors == {"ostemplate": "property is missing and it is not optional"}


def test_rootfs_that_is_no_volume_fails_where_pve_fails(prox: Any) -> None:
    # "garbage" passes the schema (any default-key volume does) but is no volume ID
    error = refused(create, prox, 143, rootfs="garbage")
    assert (error.status_code, error.content) == (500, "unable to parse volume ID 'garbage'")


def test_ssh_public_keys_are_validated(prox: Any) -> None:
    error = refused(create, prox, 146, **{"ssh-public-keys": "ssh-ed25519 not-base64 me"})
    assert (error.status_code, error.content) == (500, "SSH public key validation error")
    # every non-blank line goes through ssh-keygen on PVE, so even a comment line is refused
    error = refused(create, prox, 146, **{"ssh-public-keys": f"# lab key\n{PUBLIC_KEY}"})
    assert error.content == "SSH public key validation error"
    created(prox, 146, **{"ssh-public-keys": f"{PUBLIC_KEY}\n\n{PUBLIC_KEY}\n"})


def test_default_storage_without_container_content_is_refused(prox: Any) -> None:
    error = refused(prox.nodes("lab").lxc.post, vmid=144, ostemplate=TEMPLATE)
    assert error.status_code == 400
    assert error.errors == {"storage": "storage 'local' does not support container directories"}


def test_tags_split_on_spaces_and_are_normalised(prox: Any) -> None:
    # PVE's pve-tag-list splits on ',', ';' and whitespace, so spaces separate tags
    created(prox, 145, tags="GPU dflashops;gpu")
    assert prox.nodes("lab").lxc(145).config.get()["tags"] == "dflashops;gpu"


def test_unknown_paths_and_nodes(prox: Any) -> None:
    error = refused(prox.nodes("lab").qemu.get)
    assert (error.status_code, error.content) == (
        501,
        "Method 'GET /nodes/lab/qemu' not implemented",
    )
    error = refused(prox.nodes("elsewhere").lxc.get)
    assert error.status_code == 500 and "hostname lookup 'elsewhere' failed" in error.content


# --------------------------------------------------------------------------- devN and root@pam


def test_device_passthrough_needs_a_root_pam_password_login(double: PveDouble, prox: Any) -> None:
    for caller in (double.client(token="dflashops"), double.client(user="ops@pve")):
        error = refused(create, caller, 150, dev0="/dev/nvidia0")
        assert (error.status_code, error.content) == (403, DEV_ROOT_ONLY)
    created(prox, 150, dev0="/dev/nvidia0,mode=0666")
    token = double.client(token="dflashops")
    error = refused(token.nodes("lab").lxc(150).config.put, dev1="/dev/nvidia1")
    assert (error.status_code, error.content) == (403, DEV_ROOT_ONLY)
    error = refused(token.nodes("lab").lxc(150).config.put, delete="dev0")
    assert error.status_code == 403
    token.nodes("lab").lxc(150).config.put(cores=2)  # everything else is fine with a token
    prox.nodes("lab").lxc(150).config.put(dev1="/dev/nvidia1,gid=44")
    config = prox.nodes("lab").lxc(150).config.get()
    assert (config["dev0"], config["dev1"], config["cores"]) == (
        "/dev/nvidia0,mode=0666", "/dev/nvidia1,gid=44", 2,
    )  # fmt: skip


def test_skiplock_is_root_only(double: PveDouble, prox: Any) -> None:
    created(prox, 151)
    token = double.client(token="dflashops")
    error = refused(token.nodes("lab").lxc(151).status.start.post, skiplock=1)
    assert error.errors == {"skiplock": "Only root may use this option."}


# --------------------------------------------------------------------------- create and tasks


def test_create_runs_as_a_task_and_writes_a_pve_config(double: PveDouble, prox: Any) -> None:
    upid = create(
        prox, 160, hostname="lab-ct1", memory=4096, cores=2, rootfs="local-lvm:32",
        net0="name=eth0,bridge=vmbr0,ip=10.200.0.10/24,gw=10.200.0.1",
        **{"ssh-public-keys": PUBLIC_KEY},
    )  # fmt: skip
    status = wait(prox, upid)
    assert (status["status"], status["exitstatus"], status["type"]) == ("stopped", "OK", "vzcreate")
    log = Tasks.decode_log(prox.nodes("lab").tasks(upid).log.get())
    assert log.splitlines()[-1] == "TASK OK" and "Setting up SSH keys for root" in log
    config = prox.nodes("lab").lxc(160).config.get()
    assert config["rootfs"] == "local-lvm:vm-160-disk-0,size=32G"
    assert config["net0"].startswith("name=eth0,bridge=vmbr0,gw=10.200.0.1,hwaddr=BC:24:11:")
    assert config["net0"].endswith(",ip=10.200.0.10/24,type=veth")
    assert (config["memory"], config["cores"], config["unprivileged"]) == (4096, 2, 1)
    assert (config["ostype"], config["arch"], config["swap"]) == ("ubuntu", "amd64", 512)
    assert "lock" not in config and "ssh-public-keys" not in config
    conf_file = double.etc_pve / "lxc" / "160.conf"
    assert conf_file.read_text().startswith("arch: amd64\ncores: 2\nhostname: lab-ct1\n")
    assert (double.etc_pve / "nodes" / "lab" / "lxc" / "160.conf").samefile(conf_file)
    listed = prox.nodes("lab").lxc.get()
    assert [(c["vmid"], c["name"], c["status"]) for c in listed] == [(160, "lab-ct1", "stopped")]
    resources = prox.cluster.resources.get(type="vm")
    assert [(r["id"], r["node"], r["maxmem"]) for r in resources] == [("lxc/160", "lab", 4 << 30)]
    content = prox.nodes("lab").storage("local-lvm").content.get()
    assert [(v["volid"], v["vmid"], v["size"]) for v in content] == [
        ("local-lvm:vm-160-disk-0", 160, 32 << 30)
    ]
    assert prox.cluster.nextid.get() == "100"


def test_duplicate_vmid_is_refused_with_pve_message(prox: Any) -> None:
    created(prox, 161)
    error = refused(create, prox, 161)
    assert (error.status_code, error.content) == (500, "CT 161 already exists on node 'lab'")
    error = refused(prox.cluster.nextid.get, vmid=161)
    assert error.errors == {"vmid": "VM 161 already exists"}


def test_container_is_locked_while_create_runs(prox: Any) -> None:
    upid = create(prox, 162)
    assert prox.nodes("lab").lxc(162).status.current.get()["lock"] == "create"
    error = refused(prox.nodes("lab").lxc(162).config.put, cores=2)
    assert (error.status_code, error.content) == (500, "CT is locked (create)")
    error = refused(prox.nodes("lab").lxc(162).delete)
    assert (error.status_code, error.content) == (500, "CT is locked (create)")
    # start checks the lock inside its worker, as pve-container's vm_start does
    start = wait(prox, prox.nodes("lab").lxc(162).status.start.post())
    assert start["exitstatus"] == "CT is locked (create)"
    assert wait(prox, upid)["exitstatus"] == "OK"
    assert "lock" not in prox.nodes("lab").lxc(162).status.current.get()
    prox.nodes("lab").lxc(162).config.put(cores=2)


def test_failed_create_task_removes_its_config(prox: Any) -> None:
    status = wait(prox, create(prox, 163, ostemplate="local:vztmpl/missing.tar.zst"))
    assert status["exitstatus"] == (
        "unable to create CT 163 - volume 'local:vztmpl/missing.tar.zst' does not exist"
    )
    log = Tasks.decode_log(prox.nodes("lab").tasks(status["upid"]).log.get())
    assert log.splitlines()[-1].startswith("TASK ERROR: unable to create CT 163")
    assert refused(prox.nodes("lab").lxc(163).config.get).content == (
        "Configuration file 'nodes/lab/lxc/163.conf' does not exist"
    )


def test_template_download_through_aplinfo(prox: Any) -> None:
    template = "debian-13-standard_13.1-2_amd64.tar.zst"
    assert template in [a["template"] for a in prox.nodes("lab").aplinfo.get()]
    before = prox.nodes("lab").storage("local").content.get(content="vztmpl")
    assert f"local:vztmpl/{template}" not in [v["volid"] for v in before]
    status = wait(prox, prox.nodes("lab").aplinfo.post(storage="local", template=template))
    assert (status["type"], status["id"], status["exitstatus"]) == ("download", template, "OK")
    after = prox.nodes("lab").storage("local").content.get(content="vztmpl")
    assert f"local:vztmpl/{template}" in [v["volid"] for v in after]
    created(prox, 164, ostemplate=f"local:vztmpl/{template}")
    assert prox.nodes("lab").lxc(164).config.get()["ostype"] == "debian"
    error = refused(prox.nodes("lab").aplinfo.post, storage="local-lvm", template=template)
    assert error.content == "storage 'local-lvm' does not support templates"


def test_task_list_filters(prox: Any) -> None:
    created(prox, 165)
    wait(prox, prox.nodes("lab").lxc(165).status.start.post())
    tasks = prox.nodes("lab").tasks.get(vmid=165)
    assert [(t["type"], t["status"]) for t in tasks] == [("vzstart", "OK"), ("vzcreate", "OK")]
    assert [t["type"] for t in prox.nodes("lab").tasks.get(typefilter="vzstart")] == ["vzstart"]


# --------------------------------------------------------------------------- config edits


def test_stale_digest_is_refused(prox: Any) -> None:
    created(prox, 170)
    digest = prox.nodes("lab").lxc(170).config.get()["digest"]
    prox.nodes("lab").lxc(170).config.put(cores=2, digest=digest)
    error = refused(prox.nodes("lab").lxc(170).config.put, cores=3, digest=digest)
    assert (error.status_code, error.content) == (
        500, "detected modified configuration - file changed by other user? Try again.",
    )  # fmt: skip
    assert prox.nodes("lab").lxc(170).config.get()["cores"] == 2


def test_raw_lxc_lines_written_to_the_file_show_up_in_the_api(double: PveDouble, prox: Any) -> None:
    created(prox, 171, description="GPU box: 2x A6000")
    before = prox.nodes("lab").lxc(171).config.get()
    conf_file = double.etc_pve / "lxc" / "171.conf"
    assert conf_file.read_text().startswith("#GPU box%3A 2x A6000\n")
    with conf_file.open("a") as handle:  # what an SSH edit on the node does
        handle.write("lxc.cgroup2.devices.allow: c 195:* rwm\n")
        handle.write("lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")
        handle.write("lxc.not.a.real.key: 1\n")
    after = prox.nodes("lab").lxc(171).config.get()
    assert after["digest"] != before["digest"]
    assert after["lxc"] == [
        ["lxc.cgroup2.devices.allow", "c 195:* rwm"],
        ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"],
    ]
    assert after["description"] == "GPU box: 2x A6000\n"
    prox.nodes("lab").lxc(171).config.put(memory=2048, digest=after["digest"])
    text = conf_file.read_text()
    assert text.endswith(
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    )
    assert "memory: 2048\n" in text and "lxc.not.a.real.key" not in text


def test_delete_parameter_removes_keys(prox: Any) -> None:
    created(prox, 172, cores=2, onboot=1, net1="name=eth1,ip=dhcp")
    prox.nodes("lab").lxc(172).config.put(delete="cores,net1", onboot=0)
    config = prox.nodes("lab").lxc(172).config.get()
    assert "cores" not in config and "net1" not in config and config["onboot"] == 0
    error = refused(prox.nodes("lab").lxc(172).config.put, delete="memory")
    assert error.content == "unable to delete required option 'memory'"
    error = refused(prox.nodes("lab").lxc(172).config.put, delete="cores", cores=1)
    assert error.errors == {"delete": "you can't use '-cores' and -delete cores' at the same time"}
    error = refused(prox.nodes("lab").lxc(172).config.put)
    assert error.content == "no options specified"


def test_changes_to_a_running_container_wait_in_pending(prox: Any) -> None:
    created(prox, 173)
    wait(prox, prox.nodes("lab").lxc(173).status.start.post())
    prox.nodes("lab").lxc(173).config.put(features="nesting=1", cores=2, mp0="local-lvm:4,mp=/srv")
    current = prox.nodes("lab").lxc(173).config.get(current=1)
    assert "features" not in current and current["cores"] == 2  # cores hot-plugs
    assert current["mp0"] == "local-lvm:vm-173-disk-1,mp=/srv,size=4G"  # a new mp hot-plugs
    pending = {p["key"]: p for p in prox.nodes("lab").lxc(173).pending.get()}
    assert pending["features"] == {"key": "features", "pending": "nesting=1"}
    assert prox.nodes("lab").lxc(173).config.get()["features"] == "nesting=1"
    wait(prox, prox.nodes("lab").lxc(173).status.stop.post())
    wait(prox, prox.nodes("lab").lxc(173).status.start.post())
    assert prox.nodes("lab").lxc(173).config.get(current=1)["features"] == "nesting=1"


# --------------------------------------------------------------------------- lifecycle


def test_start_stop_destroy_lifecycle(double: PveDouble, prox: Any) -> None:
    created(prox, 180, net0="name=eth0,bridge=vmbr0,ip=10.200.0.12/24")
    ct = prox.nodes("lab").lxc(180)
    assert refused(ct.interfaces.get).content == "CT 180 not running"
    assert refused(ct.status.stop.post).content == "CT 180 not running"
    start = wait(prox, ct.status.start.post())
    assert (start["type"], start["exitstatus"]) == ("vzstart", "OK")
    assert ct.status.current.get()["status"] == "running"
    assert refused(ct.status.start.post).content == "CT 180 already running"
    eth0 = [i for i in ct.interfaces.get() if i["name"] == "eth0"]
    assert eth0[0]["inet"] == "10.200.0.12/24"
    assert refused(ct.delete).content == "unable to destroy CT 180 - container is running"
    assert wait(prox, ct.status.shutdown.post(timeout=5))["type"] == "vzshutdown"
    assert ct.status.current.get()["status"] == "stopped"
    wait(prox, ct.status.start.post())
    destroy = wait(prox, ct.delete(force=1, purge=1))
    assert (destroy["type"], destroy["exitstatus"]) == ("vzdestroy", "OK")
    assert not (double.etc_pve / "lxc" / "180.conf").exists()
    assert prox.nodes("lab").lxc.get() == []


def test_protection_blocks_destroy(prox: Any) -> None:
    created(prox, 181, protection=1)
    error = refused(prox.nodes("lab").lxc(181).delete)
    assert error.content == "can't remove CT 181 - protection mode enabled"


# --------------------------------------------------------------------------- runner


def test_runner_serves_until_sigterm(tmp_path: Path) -> None:
    password_file = tmp_path / "root.pw"
    password_file.write_text("runner-pw\n")
    token_file = tmp_path / "token"
    token_file.write_text("runner-token\n")
    argv = [
        sys.executable, "-m", "dflashops.lab.pve", "--port", "0", "--state-dir",
        str(tmp_path / "state"), "--password-file", str(password_file),
        "--token", f"root@pam!lab={token_file}", "--create-delay", "0.1",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        host_port = ready["url"].removeprefix("https://").removesuffix("/api2/json")
        prox = ProxmoxAPI(host_port, user="root@pam", password="runner-pw", verify_ssl=ready["ca"])
        created(prox, 190)
        assert Path(ready["etc_pve"], "lxc", "190.conf").exists()
        token = ProxmoxAPI(
            host_port, user="root@pam", token_name="lab", token_value="runner-token",
            verify_ssl=ready["ca"],
        )  # fmt: skip
        assert [c["vmid"] for c in token.nodes("lab").lxc.get()] == [190]
    finally:
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
    assert process.wait(timeout=5) == 0
