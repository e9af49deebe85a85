"""How causal each engine runs a speculators-trained DFlash drafter's layers, against training.

The trainer: full attention non-causal always, sliding causal unless sliding_window_non_causal.
vLLM 0.26-0.32: one dflash_config.causal = not sliding_window_non_causal (absent: non-causal) for
every layer. SGLang: sliding causal, full non-causal, no key read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.engine_causality import sglang_causality, vllm_causality
from tests.fixtures.drafter import CORRECTED, REF_36, TARGET, config
from tests.fixtures.drafter.speculators_layout import as_speculators

V32 = (0, 32, 0)


@pytest.mark.parametrize(
    ("sliding", "full", "key", "wrong", "fix"),
    [
        # z-lab's full-attention drafter as speculators 0.9.0 converts it (key false)
        (False, True, False, "full-attention layers causally", "sliding_window_non_causal: true"),
        (False, True, None, None, None),  # absent: non-causal everywhere, as trained
        (False, True, True, None, None),
        (True, False, False, None, None),  # the lab's drafter: causal sliding, as trained
        (True, False, None, "sliding layers non-causally", "sliding_window_non_causal: false"),
        (True, False, True, None, None),
        (True, True, False, "full-attention layers causally", "none in this layout on vLLM"),
        (True, True, None, "sliding layers non-causally", "none in this layout on vLLM"),
        (True, True, True, None, None),
    ],
)
def test_vllm_applies_one_override_to_every_layer(
    sliding: bool, full: bool, key: bool | None, wrong: str | None, fix: str | None
) -> None:
    found = vllm_causality(V32, has_sliding=sliding, has_full=full, non_causal_key=key)
    if wrong is None:
        assert found is None
        return
    assert found is not None and found.severity == "warning"
    assert wrong in found.found and found.expected.startswith(fix or "")


def test_vllm_before_the_override_was_read_says_nothing() -> None:
    older = (0, 25, 1)
    assert vllm_causality(older, has_sliding=False, has_full=True, non_causal_key=False) is None


def test_sglang_differs_only_for_sliding_layers_trained_non_causal() -> None:
    found = sglang_causality(has_sliding=True, non_causal_key=True)
    assert found is not None and "sliding layers causally" in found.found
    assert sglang_causality(has_sliding=True, non_causal_key=False) is None
    assert sglang_causality(has_sliding=False, non_causal_key=True) is None


def test_the_check_reports_it_for_the_speculators_layout_only(tmp_path: Path) -> None:
    drafter = tmp_path / "drafter"
    shutil.copytree(CORRECTED, drafter)
    data = as_speculators(config(CORRECTED)) | {"sliding_window_non_causal": True}
    (drafter / "config.json").write_text(json.dumps(data))

    def keys(path: Path, engine: str) -> set[str]:
        run = check_paths(str(path), target=str(TARGET), ref=REF_36, engine=parse_engine(engine))
        return {f.key for f in run.result.findings if f.severity == "warning"}

    # the corrected Qwen3.6 drafter mixes 4 sliding layers with 1 full one
    assert "engine.sliding_window_non_causal" in keys(drafter, "sglang==0.5.16")
    assert "engine.sliding_window_non_causal" not in keys(drafter, "vllm==0.32.0")  # all off
    assert "engine.sliding_window_non_causal" not in keys(CORRECTED, "vllm==0.32.0")  # z-lab
