"""``provision`` / ``status`` / ``destroy`` against an isolated lab: real proxmoxer over verified
HTTPS to the schema-checked PVE double, SSH to the lab's PVE node host and into the containers.

Each test class runs its own lab (bridge dfolabp0, 10.200.10.0/24, a free API port, node host
dfo-nodep; vmids 950-989, so container namespaces are dfop-ct95x..98x), one after the other:
``TestCurrentPve`` on the default node (PVE 9.1, cgroup v2, uvm present: devN), ``TestOldPve``
on a PVE 8.0 cgroup v1 node (raw lxc lines over SSH, no interfaces endpoint).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from dflashops.inventory.load import Inventory, load_inventory
from dflashops.proxmox.apply import ProvisionOptions, provision
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.identity import list_resources
from dflashops.proxmox.report import ProvisionReport
from dflashops.remote import SshConnection
from tests.support.lab import isolated_lab_env, require_lab, run_cli

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]

CIDR = "10.200.10.0/24"
NET = "10.200.10"
OPTIONS = ProvisionOptions(
    lock_wait_s=60, task_timeout_s=60, address_timeout_s=30, ssh_timeout_s=30, vmid_floor=950
)


dflashops = run_cli


@dataclass
class Lab:
    env: dict[str, str]
    state: Path
    base: dict[str, Any]  # the lab's own inventory document
    workdir: Path

    @property
    def etc_pve(self) -> Path:
        return self.state / "pve" / "etc-pve" / "nodes" / "lab" / "lxc"

    def conf(self, vmid: int) -> Path:
        return self.etc_pve / f"{vmid}.conf"

    def inventory(
        self,
        name: str,
        containers: dict[str, dict[str, Any]],
        *,
        token: bool = False,
        overrides: tuple[str, ...] = (),
    ) -> Inventory:
        doc = json.loads(json.dumps(self.base))
        doc["containers"] = containers
        if token:
            doc["clusters"]["lab"]["auth"] = {
                "user": "root@pam",
                "token_name": "dflashops",
                "token_secret": {"file": str(self.state / "pve-token")},
            }
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_inventory(path, overrides)

    def client(self) -> PveClient:
        inv = load_inventory(self.state / "inventory.yaml")
        return PveClient.for_cluster(inv, "lab")


def ct(vmid: int | str, host: int, **fields: Any) -> dict[str, Any]:
    """A container entry with a static address on the test lab's network."""
    return {
        "vmid": vmid,
        "network": {"bridge": "vmbr0", "ip": f"{NET}.{host}/24", "gateway": f"{NET}.1"},
        **fields,
    }


@pytest.fixture(scope="class")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_lab()
    workdir = tmp_path_factory.mktemp("provision")
    spec = getattr(request.cls, "NODE_SPEC", None)
    env = isolated_lab_env(workdir, tag="p", cidr=CIDR, node_spec=spec)
    dflashops(env, "lab", "down", check=False)  # leftovers of a crashed earlier run
    try:
        status = json.loads(dflashops(env, "lab", "up", "--json").stdout)
        state = Path(env["DFLASHOPS_LAB_STATE"])
        base = yaml.safe_load(Path(status["inventory"]).read_text())
        yield Lab(env=env, state=state, base=base, workdir=workdir)
    finally:
        dflashops(env, "lab", "down", check=False)


def names_in_pve(client: PveClient, name: str) -> list[int]:
    return sorted(r.vmid for r in list_resources(client) if r.name == name)


def assert_ok(report: ProvisionReport) -> None:
    assert report.ok, report.failures


def login(inv: Inventory, name: str, address: str) -> str:
    with SshConnection.from_access(inv.container(name).ssh, host=address, deadline=30) as conn:
        return conn.run("hostname").stdout.strip()


def set_lock(path: Path, lock: str | None) -> None:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("lock:")]
    if lock:
        lines.insert(0, f"lock: {lock}")
    path.write_text("\n".join(lines) + "\n")


class TestCurrentPve:
    """PVE 9.1 node (the lab default): devN through the API, or by `pct set` with a token."""

    def test_creates_a_reachable_gpu_container_and_reruns_change_nothing(self, lab: Lab) -> None:
        inv = lab.inventory(
            "gpu",
            {"gpu1": ct(950, 50, gpus=[0, 1], mounts=[{"host_path": "/srv/m", "path": "/models"}])},
        )
        first = provision(inv, ["gpu1"], options=OPTIONS)
        assert_ok(first)
        entry = first.container("gpu1")
        assert entry.action == "create" and entry.vmid == 950 and entry.address == f"{NET}.50"
        assert entry.passthrough == "devN-api"
        assert login(inv, "gpu1", f"{NET}.50") == "gpu1"  # host key checked against known_hosts
        client = lab.client()
        config = client.ct_config("lab", 950)
        assert config["tags"] == "dflashops" and config["features"] == "nesting=1"
        assert config["mp0"] == "/srv/m,mp=/models,ro=1"
        devices = sorted(v for k, v in config.items() if k.startswith("dev"))
        assert devices == sorted(
            f"/dev/{n},mode=0666"
            for n in (
                "nvidia0",
                "nvidia1",
                "nvidiactl",
                "nvidia-uvm",
                "nvidia-uvm-tools",
                "nvidia-modeset",
            )
        )
        # the lab inventory's nvidia_driver: skip (its GPUs have no driver behind them): the GPU
        # steps inside are planned and shown, not applied
        assert lab.base["defaults"]["nvidia_driver"] == "skip"
        assert any("580.95.05" in step for step in entry.guest_plan_only)

        digest = config["digest"]
        started = time.monotonic()
        for _ in range(20):
            again = provision(inv, ["gpu1"], options=OPTIONS)
            assert_ok(again)
            entry = again.container("gpu1")
            assert entry.action == "unchanged" and entry.applied == [] and not entry.guest_steps
        assert time.monotonic() - started < 120
        assert client.ct_config("lab", 950)["digest"] == digest
        assert names_in_pve(client, "gpu1") == [950]

    def test_concurrent_provisions_end_with_one_container(self, lab: Lab) -> None:
        inv = lab.inventory("race", {"race-auto": ct("auto", 60), "race-fixed": ct(959, 59)})
        client = lab.client()
        for name in ("race-auto", "race-fixed"):
            reports: list[ProvisionReport] = []

            def run(name: str = name, out: list[ProvisionReport] = reports) -> None:
                out.append(provision(inv, [name], options=OPTIONS))

            threads = [threading.Thread(target=run) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert len(reports) == 2
            for report in reports:
                assert_ok(report)
            vmids = names_in_pve(client, name)
            assert len(vmids) == 1, vmids
            assert {r.container(name).vmid for r in reports} == set(vmids)
            assert client.ct_status("lab", vmids[0])["status"] == "running"
            assert login(inv, name, str(reports[0].container(name).address)) == name

    def test_untagged_namesake_is_refused_and_untouched(self, lab: Lab) -> None:
        client = lab.client()
        upid = client.post(
            "nodes/lab/lxc",
            vmid=970,
            ostemplate=lab.base["defaults"]["template"],
            hostname="stranger",
            storage="local-lvm",
            cores=1,
        )
        client.wait_task(upid, timeout_s=60)
        before = lab.conf(970).read_bytes()
        inv = lab.inventory("stranger", {"stranger": ct("auto", 70)})
        report = provision(inv, ["stranger"], options=OPTIONS)
        assert not report.ok
        (failure,) = report.failures
        assert "vmid 970" in failure and "lacks the 'dflashops' tag" in failure
        assert lab.conf(970).read_bytes() == before
        assert names_in_pve(client, "stranger") == [970]
        done = dflashops(lab.env, "-i", str(inv.path), "destroy", "--yes", "stranger", check=False)
        assert done.returncode == 1 and "refused" in done.stderr
        # every command that works inside a container asks PVE first (issue 20): the stranger's
        # address is never used, whatever the inventory says
        book = str(Path(__file__).parents[2] / "playbooks" / "lab-dflash.yaml")
        for command in (["stop"], ["logs"], ["restart"], ["drafter", "push", "-p", book]):
            refused = dflashops(lab.env, "-i", str(inv.path), *command, "stranger", check=False)
            assert refused.returncode == 1, (command, refused.stderr)
            assert "stranger: refused, vmid 970" in refused.stderr, (command, refused.stderr)
            assert "lacks the 'dflashops' tag" in refused.stderr
        assert lab.conf(970).read_bytes() == before

    def test_locked_container_is_waited_for(self, lab: Lab) -> None:
        inv = lab.inventory("locky", {"locky": ct(971, 71)})
        assert_ok(provision(inv, ["locky"], options=OPTIONS))
        set_lock(lab.conf(971), "backup")
        changed = lab.inventory("locky2", {"locky": ct(971, 71)}, overrides=("locky.cores=3",))
        said: list[str] = []
        reports: list[ProvisionReport] = []
        worker = threading.Thread(
            target=lambda: reports.append(provision(changed, options=OPTIONS, progress=said.append))
        )
        started = time.monotonic()
        worker.start()
        time.sleep(2.0)
        assert worker.is_alive()  # still waiting for the lock
        assert lab.client().ct_config("lab", 971)["cores"] == 2
        set_lock(lab.conf(971), None)
        worker.join(60)
        assert reports and time.monotonic() - started >= 2.0
        assert_ok(reports[0])
        assert lab.client().ct_config("lab", 971)["cores"] == 3
        assert any("locked (backup)" in line for line in said)

    def test_token_auth_passes_gpus_by_pct_set_over_ssh(self, lab: Lab) -> None:
        inv = lab.inventory("token", {"tok": ct(972, 72, gpus=[1])}, token=True)
        first = provision(inv, options=OPTIONS)
        assert_ok(first)
        assert first.container("tok").passthrough == "devN-pct"
        assert any(step.startswith("pct set") for step in first.container("tok").applied)
        config = lab.client().ct_config("lab", 972)
        devices = {v for k, v in config.items() if k.startswith("dev")}
        assert "/dev/nvidia1,mode=0666" in devices and "/dev/nvidia0,mode=0666" not in devices
        again = provision(inv, options=OPTIONS)
        assert again.container("tok").action == "unchanged"

    def test_raw_lines_go_before_a_snapshot_section(self, lab: Lab) -> None:
        inv = lab.inventory("raw", {"rawsnap": ct(973, 73, gpus=[0], passthrough="raw")})
        assert_ok(provision(inv, options=OPTIONS))
        client = lab.client()
        lines = client.ct_config("lab", 973)["lxc"]
        assert ["lxc.cgroup2.devices.allow", "c 195:* rwm"] in lines
        mount = "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"
        assert ["lxc.mount.entry", mount] in lines
        # drift: one line lost, and a snapshot section now ends the file
        text = lab.conf(973).read_text().replace(f"lxc.mount.entry: {mount}\n", "")
        snapshot = "\n[before]\ncores: 2\nhostname: rawsnap\n"
        lab.conf(973).write_text(text + snapshot)
        report = provision(inv, options=OPTIONS)
        assert_ok(report)
        assert any(step.startswith("restart") for step in report.container("rawsnap").applied)
        text = lab.conf(973).read_text()
        main, _, rest = text.partition("\n[before]\n")
        assert f"lxc.mount.entry: {mount}" in main.splitlines()
        assert rest == "cores: 2\nhostname: rawsnap\n"
        assert ["lxc.mount.entry", mount] in client.ct_config("lab", 973)["lxc"]
        assert provision(inv, options=OPTIONS).container("rawsnap").action == "unchanged"

    def test_missing_template_is_downloaded_first(self, lab: Lab) -> None:
        template = "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst"
        inv = lab.inventory("tmpl", {"tmpl": ct(974, 74, template=template)})
        report = provision(inv, options=OPTIONS)
        assert_ok(report)
        assert any(s.startswith("download template") for s in report.container("tmpl").applied)
        volids = {i["volid"] for i in lab.client().storage_content("lab", "local", "vztmpl")}
        assert template in volids

    def test_cli_dry_run_status_and_destroy(self, lab: Lab) -> None:
        inv = lab.inventory("cli", {"cli1": ct(975, 75)})
        args = ("-i", str(inv.path))
        plan = json.loads(dflashops(lab.env, *args, "provision", "--dry-run", "--json").stdout)
        assert plan["dry_run"] is True and plan["containers"][0]["action"] == "create"
        assert names_in_pve(lab.client(), "cli1") == []  # a dry run creates nothing
        refused = dflashops(lab.env, *args, "provision", check=False)  # stdin is not a terminal
        assert refused.returncode == 1 and "--yes" in refused.stderr
        done = json.loads(dflashops(lab.env, *args, "provision", "--yes", "--json").stdout)
        assert done["containers"][0]["address"] == f"{NET}.75"
        (status,) = json.loads(dflashops(lab.env, *args, "status", "--json").stdout)
        assert (status["vmid"], status["state"], status["address"]) == (975, "running", f"{NET}.75")
        assert status["tags"] == ["dflashops"]
        # the server part is probed over SSH: nothing deployed yet
        assert (status["server"]["deployed"], status["server"]["running"]) == (False, False)
        gone = dflashops(lab.env, *args, "destroy", "--yes", "cli1")
        assert "destroyed" in gone.stdout
        assert names_in_pve(lab.client(), "cli1") == []
        (status,) = json.loads(dflashops(lab.env, *args, "status", "--json").stdout)
        assert status["state"] == "absent"
        again = dflashops(lab.env, *args, "destroy", "--yes", "cli1")
        assert "absent" in again.stdout


class TestOldPve:
    """PVE 8.0 node on cgroup v1: no devN yet (auto -> raw lines over SSH), no interfaces."""

    NODE_SPEC: ClassVar[dict[str, Any]] = {"pve_version": "8.0.4", "cgroup": "v1"}

    def test_auto_falls_back_to_raw_cgroup_v1_lines(self, lab: Lab) -> None:
        inv = lab.inventory("old", {"old1": ct(976, 76, gpus="all")})
        report = provision(inv, options=OPTIONS)
        assert_ok(report)
        entry = report.container("old1")
        assert entry.passthrough == "raw" and entry.address == f"{NET}.76"
        lines = lab.client().ct_config("lab", 976)["lxc"]
        keys = {key for key, _ in lines}
        assert keys == {"lxc.cgroup.devices.allow", "lxc.mount.entry"}
        assert ["lxc.cgroup.devices.allow", "c 511:* rwm"] in lines  # the node's uvm major
        assert login(inv, "old1", f"{NET}.76") == "old1"
        assert provision(inv, options=OPTIONS).container("old1").action == "unchanged"

    def test_devn_is_refused_before_pve_8_1(self, lab: Lab) -> None:
        inv = lab.inventory("olddev", {"old2": ct(977, 77, gpus=[0], passthrough="devN")})
        report = provision(inv, options=OPTIONS)
        assert not report.ok
        assert "devN needs PVE >= 8.1" in report.failures[0]
        assert names_in_pve(lab.client(), "old2") == []
