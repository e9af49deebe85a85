"""GPU hosts: single-stream decode far below the bandwidth roofline × acceptance length, and
each likely cause checked from ``nvidia-smi`` and the command line, never assumed.

Every cause is its own finding (each has its own fix); the roofline finding lists which causes
were checked and what they showed. Clock and PCIe-generation checks need a sample taken under
load (an idle GPU lowers both on purpose); the power limit, PCIe width, throttle reasons, P2P and
the flags are read whatever the load.
"""

from __future__ import annotations

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding
from dflashops.doctor.nvidia import HARMFUL_REASONS, GpuState
from dflashops.doctor.rules import RuleResult, ok, skip
from dflashops.roofline.model import roofline

# "far below": under this share of the ceiling (a well-tuned batch-1 decode reaches 60-80 %)
FAR_BELOW_ROOFLINE = 0.5
BUSY_PCT = 50.0
CLOCK_SHORT = 0.9  # a memory clock under 90 % of its maximum under load
POWER_LOWERED = 0.95


def roofline_gap(facts: DoctorFacts) -> RuleResult:
    if facts.device != "cuda":
        return skip(f"the server runs on {facts.device}: no GPU roofline")
    if facts.roofline is None:
        return skip(facts.roofline_note or "no roofline (GPU or weights unknown)")
    acceptance = facts.acceptance
    if acceptance is None or acceptance.decode_tok_s is None:
        return skip("no single-stream decode rate (doctor probes only an idle server)")
    length = acceptance.acceptance_length or 1.0
    result = roofline(
        facts.roofline, acceptance_length=length, measured_tok_s=acceptance.decode_tok_s
    )
    share = result.fraction_of_ceiling or 0.0
    if share >= FAR_BELOW_ROOFLINE:
        return ok(f"{share:.0%} of the roofline ({result.ceiling_tok_s:.0f} tok/s)")
    causes = [f.title for rule in (gpu_state, p2p, eager_mode) for f in rule(facts).findings]
    checked = (
        "causes found: " + "; ".join(causes)
        if causes
        else "checked and clear: power limit, throttle reasons, PCIe width, clocks under load, "
        "P2P under TP, eager mode (see the KV-cache and prefix-cache checks)"
    )
    return RuleResult(
        [
            Finding(
                rule="roofline",
                severity="warning",
                title=f"decode at {share:.0%} of the bandwidth roofline",
                evidence=(
                    f"single-stream decode {acceptance.decode_tok_s:.1f} tok/s "
                    f"({acceptance.source})",
                    f"roofline {result.ceiling_tok_s:.1f} tok/s = {result.bandwidth_gbps:g} GB/s "
                    f"× tp {result.tp} / {result.bytes_per_step / 1e9:.2f} GB per step × "
                    f"acceptance length {length:.2f}",
                    checked,
                ),
                fix="fix the causes listed; then `dflashops bench "
                f"{facts.container}` to measure again",
                impact=1.0 - share,
                details=result.model_dump(mode="json"),
            )
        ]
    )


def _gpu_finding(gpu: GpuState, title: str, evidence: str, fix: str) -> Finding:
    return Finding(
        rule="gpu",
        severity="warning",
        title=f"GPU {gpu.index} ({gpu.name}): {title}",
        evidence=(evidence,),
        fix=fix,
        details={"gpu": gpu.index},
    )


def gpu_state(facts: DoctorFacts) -> RuleResult:
    if facts.device != "cuda":
        return skip(f"the server runs on {facts.device}")
    if facts.gpu is None or not facts.gpu.gpus:
        return skip(facts.gpu_problem or "nvidia-smi not read")
    found: list[Finding] = []
    under_load = 0
    for gpu in facts.gpu.gpus:
        default, limit = gpu.power_default_limit_w, gpu.power_limit_w
        if default and limit and limit < POWER_LOWERED * default:
            found.append(
                _gpu_finding(
                    gpu,
                    f"power limit lowered to {limit:.0f} W (default {default:.0f} W)",
                    f"power.limit {limit:.0f} W, power.default_limit {default:.0f} W",
                    f"on the node: nvidia-smi -i {gpu.index} -pl {default:.0f}",
                )
            )
        bits = gpu.throttle_reasons or 0
        if bits & HARMFUL_REASONS:
            reasons = [r for r in gpu.reasons if r != "SW power cap"]
            found.append(
                _gpu_finding(
                    gpu,
                    "clocks slowed down: " + ", ".join(reasons),
                    f"clocks_throttle_reasons.active {bits:#x}",
                    f"on the node: nvidia-smi -i {gpu.index} -q -d PERFORMANCE,TEMPERATURE,POWER "
                    "(cooling, power delivery)",
                )
            )
        if gpu.pcie_width and gpu.pcie_width_max and gpu.pcie_width < gpu.pcie_width_max:
            found.append(
                _gpu_finding(
                    gpu,
                    f"PCIe link x{gpu.pcie_width} of x{gpu.pcie_width_max}",
                    f"pcie.link.width.current {gpu.pcie_width}, max {gpu.pcie_width_max}",
                    "reseat the card or move it to a full-width slot; check the riser",
                )
            )
        busy = (gpu.utilization_pct or 0.0) >= BUSY_PCT
        if not busy:
            continue
        under_load += 1
        if gpu.pcie_gen and gpu.pcie_gen_max and gpu.pcie_gen < gpu.pcie_gen_max:
            found.append(
                _gpu_finding(
                    gpu,
                    f"PCIe gen {gpu.pcie_gen} of {gpu.pcie_gen_max} under load",
                    f"pcie.link.gen.current {gpu.pcie_gen} at {gpu.utilization_pct:.0f} % busy",
                    "check the BIOS PCIe speed setting and the slot",
                )
            )
        mem, mem_max = gpu.mem_clock_mhz, gpu.mem_clock_max_mhz
        if mem and mem_max and mem < CLOCK_SHORT * mem_max:
            found.append(
                _gpu_finding(
                    gpu,
                    f"memory clock {mem:.0f} of {mem_max:.0f} MHz under load",
                    f"clocks.mem {mem:.0f} MHz, clocks.max.mem {mem_max:.0f} MHz at "
                    f"{gpu.utilization_pct:.0f} % busy: decode is bound by memory bandwidth",
                    f"on the node: nvidia-smi -i {gpu.index} -rmc (reset locked memory clocks)",
                )
            )
    if found:
        return RuleResult(found)
    load = (
        f"; clocks and PCIe gen checked under load on {under_load} GPU(s)"
        if under_load
        else "; clocks not judged (GPUs idle when sampled)"
    )
    return ok(f"{len(facts.gpu.gpus)} GPU(s): power limit, throttle reasons, PCIe width{load}")


def p2p(facts: DoctorFacts) -> RuleResult:
    tp = facts.tensor_parallel
    if tp < 2:
        return skip("tensor parallel 1: no peer traffic")
    manifest = facts.manifest
    disabled = (manifest.exec_env.get("NCCL_P2P_DISABLE") == "1" if manifest else False) or (
        manifest.nccl_p2p_disable if manifest else False
    )
    found: list[Finding] = []
    if disabled:
        found.append(
            Finding(
                rule="p2p",
                severity="warning",
                title=f"P2P off under TP {tp}: NCCL_P2P_DISABLE=1",
                evidence=(
                    "deployed.json: the preflight set NCCL_P2P_DISABLE=1 (peer access failed)",
                ),
                fix="enable IOMMU passthrough / ACS off on the node, then "
                f"`dflashops launch {facts.container}`",
            )
        )
    if facts.gpu is not None and facts.gpu.p2p:
        bad = sorted(
            (pair, status)
            for pair, status in facts.gpu.p2p.items()
            if pair[0] < tp and pair[1] < tp and status != "OK"
        )
        if bad:
            found.append(
                Finding(
                    rule="p2p",
                    severity="warning",
                    title=f"P2P read not available between {len(bad)} GPU pair(s) under TP {tp}",
                    evidence=tuple(f"GPU{a} -> GPU{b}: {s}" for (a, b), s in bad[:8]),
                    fix="on the node: check `nvidia-smi topo -m`, IOMMU and ACS settings",
                )
            )
    elif not disabled:
        return skip("nvidia-smi topo -p2p r not read")
    return RuleResult(found) if found else ok(f"P2P OK between the {tp} TP GPUs")


def eager_mode(facts: DoctorFacts) -> RuleResult:
    if facts.running_argv is None:
        return skip("no running server")
    if "--enforce-eager" not in facts.running_argv:
        return ok("CUDA graphs on (no --enforce-eager)")
    if facts.device != "cuda":
        return ok(f"--enforce-eager on {facts.device}: no CUDA graphs to lose")
    return RuleResult(
        [
            Finding(
                rule="eager",
                severity="warning",
                title="eager mode on a GPU: no CUDA graphs, every decode step pays launch overhead",
                evidence=("--enforce-eager on the running command line",),
                fix=f"dflashops launch {facts.container} --set server.enforce_eager=false",
            )
        ]
    )
