"""`drafter push` over real SSH: the incident's guessed config corrected in a container.

The container is a netns sshd host whose /srv is a folder of this test, so the file can be
inspected directly even after the host was killed mid-push. Its /root stays private: a shell
killed mid-`pyenv rehash` in root's ~/.bashrc would otherwise leave pyenv's lock behind and
stall every later shell on this machine for a minute.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from pathlib import Path

import pytest

from dflashops.drafter.push import push_drafter_config
from dflashops.drafter.registry import load_registry
from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.host_model import Mount, SshHost
from dflashops.playbook.models import Playbook
from tests.fixtures.drafter.speculators_layout import as_speculators
from tests.support.faults import kill_host
from tests.support.ssh_hosts import HostFactory

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drafter"
GUESSED = FIXTURES / "qwen36-27b-dflash-guessed"
TARGET = FIXTURES / "qwen36-27b-target"
REF = "qwen3.6-27b-dflash"


def _playbook() -> Playbook:
    return Playbook.model_validate(
        {
            "name": "push-test",
            "model": {"path": "/srv/target"},
            "drafter": {"method": "dflash", "ref": REF, "model": {"path": "/srv/drafter"}},
            "engine": {"name": "vllm", "version": "0.34.0"},
            "server": {"num_speculative_tokens": 6},
        }
    )


def _inventory(tmp_path: Path, host: SshHost) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        json.dumps(
            {
                "clusters": {
                    "c": {
                        "api_url": "https://127.0.0.1:9",
                        "auth": {"password": {"env": "UNUSED_PVE_PASSWORD"}},
                        "nodes": {"n": {}},
                    }
                },
                "containers": {
                    "ct": {
                        "ssh": {
                            "host": host.address,
                            "key_file": str(host.key_file),
                            "known_hosts": str(host.known_hosts),
                        }
                    }
                },
            }
        )
    )
    # these SSH hosts are not PVE containers: what is tested is the push, not the PVE check
    return load_inventory(path).without_pve_check()


def _seed(srv: Path) -> None:
    for name, source in (("drafter", GUESSED), ("target", TARGET)):
        shutil.rmtree(srv / name, ignore_errors=True)
        shutil.copytree(source, srv / name)


@pytest.fixture
def container(netns_host_factory, tmp_path: Path) -> tuple[SshHost, Path]:  # type: ignore[no-untyped-def]
    srv = tmp_path / "srv"
    srv.mkdir()
    _seed(srv)
    host = netns_host_factory(
        mounts=[Mount.bind(srv, "/srv", read_only=False), Mount.tmpfs("/root")]
    )
    return host, srv


def test_push_corrects_exactly_the_certain_keys(
    container: tuple[SshHost, Path], tmp_path: Path
) -> None:
    host, srv = container
    inventory, book = _inventory(tmp_path, host), _playbook()
    before = json.loads((srv / "drafter" / "config.json").read_text())

    dry = push_drafter_config(inventory, "ct", book, dry_run=True)
    changed = {c.key for c in dry.changes}
    assert {
        "layer_types",
        "dflash_config.target_layer_ids",
        "dflash_config.mask_token_id",
    } <= changed
    assert json.loads((srv / "drafter" / "config.json").read_text()) == before  # nothing written

    result = push_drafter_config(inventory, "ct", book)
    assert result.pushed and result.backup
    after = json.loads((srv / "drafter" / "config.json").read_text())
    entry = load_registry().resolve(REF)
    for rv in entry.keys:
        if rv.certain:
            assert any(_get(after, p) == rv.value for p in rv.read_from), rv.path
    # keys the reference does not know are kept as they were
    for key in set(before) - {k.split(".")[0] for k in changed}:
        assert after[key] == before[key]
    backups = list((srv / "drafter").glob("config.json.*.bak"))
    assert len(backups) == 1
    assert json.loads(backups[0].read_text()) == before
    assert not [f for f in result.findings if f.startswith("error")], result.findings
    assert result.relaunch_needed is False and "no server deployed" in result.server_note

    again = push_drafter_config(inventory, "ct", book)
    assert again.changes == [] and not again.pushed


def _get(data: object, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def test_push_interrupted_by_a_killed_host_never_leaves_a_partial_file(
    netns_host_factory: HostFactory, tmp_path: Path
) -> None:
    srv = tmp_path / "srv"
    srv.mkdir()
    old_text = (GUESSED / "config.json").read_text()
    outcomes = set()
    rng = random.Random(7)
    for round_no in range(8):
        _seed(srv)
        host = netns_host_factory(
            mounts=[Mount.bind(srv, "/srv", read_only=False), Mount.tmpfs("/root")]
        )
        inventory = _inventory(tmp_path, host)
        errors: list[Exception] = []

        def work(inv: Inventory = inventory, errs: list[Exception] = errors) -> None:
            try:
                push_drafter_config(inv, "ct", _playbook())
            except DflashopsError as exc:
                errs.append(exc)

        thread = threading.Thread(target=work)
        thread.start()
        time.sleep(rng.uniform(0.0, 0.6))
        kill_host(host)
        thread.join(timeout=150)
        assert not thread.is_alive(), f"round {round_no}: push did not return after the kill"
        text = (srv / "drafter" / "config.json").read_text()
        config = json.loads(text)  # never a truncated file
        if text == old_text:
            assert errors, f"round {round_no}: the push reported success but nothing changed"
            outcomes.add("old")
        else:
            assert config["dflash_config"]["mask_token_id"] == 248070
            outcomes.add("new")
        # a kill can leave the hidden upload temp file, never a partial config.json; the
        # next push removes it and converges
        push_drafter_config(
            _inventory(tmp_path, _fresh(netns_host_factory, srv)), "ct", _playbook()
        )
        final = json.loads((srv / "drafter" / "config.json").read_text())
        assert final["dflash_config"]["mask_token_id"] == 248070
        assert not [p for p in (srv / "drafter").iterdir() if p.name.startswith(".config.json")]
    assert outcomes  # both outcomes are fine; a partial file is not


def _fresh(factory, srv: Path) -> SshHost:  # type: ignore[no-untyped-def]
    host: SshHost = factory(mounts=[Mount.bind(srv, "/srv", read_only=False), Mount.tmpfs("/root")])
    return host


def test_push_corrects_a_speculators_layout_in_its_own_layout(
    container: tuple[SshHost, Path], tmp_path: Path
) -> None:
    host, srv = container
    path = srv / "drafter" / "config.json"
    path.write_text(json.dumps(as_speculators(json.loads((GUESSED / "config.json").read_text()))))
    result = push_drafter_config(_inventory(tmp_path, host), "ct", _playbook())
    assert result.pushed
    assert {c.key for c in result.changes} >= {
        "aux_hidden_state_layer_ids",
        "mask_token_id",
        "transformer_layer_config.layer_types",
    }
    after = json.loads(path.read_text())
    entry = load_registry().resolve(REF)
    wanted = {rv.path: rv.value for rv in entry.keys}
    assert after["speculators_model_type"] == "dflash" and "dflash_config" not in after
    assert after["aux_hidden_state_layer_ids"] == [
        i + 1 for i in wanted["dflash_config.target_layer_ids"]
    ]
    assert after["mask_token_id"] == wanted["dflash_config.mask_token_id"]
    assert after["transformer_layer_config"]["layer_types"] == wanted["layer_types"]
    assert not [f for f in result.findings if f.startswith("error")], result.findings
