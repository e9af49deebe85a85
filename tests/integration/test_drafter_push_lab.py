"""Issue 7 end to end on the lab: a wrong drafter config in a container is refused by `launch`,
corrected by `drafter push` over real SSH, and the lab's real vLLM server then starts with it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dflashops.drafter.push import push_drafter_config
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.launch.core import launch
from dflashops.launch.report import LaunchRefused
from dflashops.playbook.load import load_playbook, resolve_playbook_path
from dflashops.proxmox.apply import provision
from dflashops.remote import SshConnection, get_text
from tests.support.lab import isolated_lab_env, require_lab, run_cli
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = [pytest.mark.root, pytest.mark.vllm, pytest.mark.timeout(600)]

LAB_DRAFTER = "/opt/lab/models/tiny-qwen3-dflash"
PUSHED = "/srv/drafter"


@pytest.fixture(scope="module")
def lab_inventory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inventory]:
    require_lab()
    runtime_or_skip()
    env = isolated_lab_env(tmp_path_factory.mktemp("pushlab"), tag="u", cidr="10.200.13.0/24")
    run_cli(env, "lab", "down", check=False)
    with VllmSlot():
        status = json.loads(run_cli(env, "lab", "up", "--json").stdout)
        try:
            inventory = load_inventory(Path(status["inventory"]))
            report = provision(inventory, ["lab-ct1"])
            assert report.ok, report.failures
            yield inventory
        finally:
            run_cli(env, "lab", "down", check=False, timeout=180)


def test_wrong_config_refused_then_pushed_and_served(lab_inventory: Inventory) -> None:
    ct = lab_inventory.container("lab-ct1")
    with SshConnection.from_access(ct.ssh, host=ct.ssh_host, deadline=60) as conn:
        conn.run(f"rm -rf {PUSHED} && cp -r {LAB_DRAFTER} {PUSHED}")
        config = json.loads(get_text(conn, f"{PUSHED}/config.json"))
        # the lab drafter is in the speculators layout (trained and exported by speculators)
        config["mask_token_id"] = 7  # ordinary text, not <|mask|>
        config["aux_hidden_state_layer_ids"] = [2, 3, 4]  # target layers 1-3: fc still fits
        conn.run(f"cat > {PUSHED}/config.json", stdin=json.dumps(config, indent=2))
    book = load_playbook(
        resolve_playbook_path("lab-dflash"),
        [f"drafter.model.path={PUSHED}", "drafter.ref=dflashops-lab/tiny-qwen3-dflash"],
    )

    with pytest.raises(Exception, match=r"mask_token_id|aux_hidden_state_layer_ids") as refused:
        launch(lab_inventory, "lab-ct1", book)
    assert isinstance(refused.value, LaunchRefused)  # before anything changed

    result = push_drafter_config(lab_inventory, "lab-ct1", book)
    assert {c.key for c in result.changes} == {"mask_token_id", "aux_hidden_state_layer_ids"}
    assert result.pushed and result.backup
    assert not [f for f in result.findings if f.startswith("error")]

    served = launch(lab_inventory, "lab-ct1", book)
    assert served.action == "started"
    with httpx.Client(timeout=120) as client:
        reply = client.post(
            f"{served.endpoint}/completions",
            json={"model": "tiny", "prompt": "def f(x):", "max_tokens": 8, "temperature": 0},
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 8

    again = push_drafter_config(lab_inventory, "lab-ct1", book)
    assert again.changes == [] and not again.pushed
