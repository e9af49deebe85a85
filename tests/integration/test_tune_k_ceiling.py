"""The live tuner reads the container's DFlash drafter over real SSH and keeps k under
``block_size - 1`` (a larger k is refused by launch's drafter check: a wasted probe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflashops.lab.host_model import SshHost
from dflashops.playbook.load import load_playbook, resolve_playbook_path
from dflashops.tune.k_ceiling import dflash_k_ceiling
from tests.fixtures.drafter.speculators_layout import as_speculators
from tests.support.ssh_hosts import connect_to

pytestmark = pytest.mark.timeout(120)


@pytest.mark.root
def test_the_ceiling_is_block_size_minus_one_in_either_layout(
    loopback_host: SshHost, tmp_path: Path
) -> None:
    zlab = {
        "architectures": ["DFlashDraftModel"],
        "vocab_size": 2048,
        "block_size": 5,
        "dflash_config": {"target_layer_ids": [0, 1, 2], "mask_token_id": 3},
    }
    layouts = {"z-lab": zlab, "speculators": as_speculators({**zlab, "block_size": 16})}
    expected = {"z-lab": 4, "speculators": 15}
    with connect_to(loopback_host) as conn:
        for name, config in layouts.items():
            folder = tmp_path / name
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(config))
            book = load_playbook(
                resolve_playbook_path("lab-dflash"), [f"drafter.model.path={folder}"]
            )
            assert dflash_k_ceiling(conn, book) == expected[name], name
        missing = load_playbook(
            resolve_playbook_path("lab-dflash"), [f"drafter.model.path={tmp_path / 'none'}"]
        )
        assert dflash_k_ceiling(conn, missing) is None  # the drafter check speaks for it
        ngram = load_playbook(
            resolve_playbook_path("lab-dflash"),
            ["drafter.method=ngram", "drafter.model=null", "drafter.ref=null"],
        )
        assert dflash_k_ceiling(conn, ngram) is None
