"""Build the lab models offline: a tiny Qwen3 target, a DFlash drafter, an identical draft, a
draft whose per-position acceptance decays, and prompts.

Runs inside the vLLM venv (torch, transformers, tokenizers and safetensors come with vLLM), as
``python -m dflashops.lab.models OUT``. The weights are random (there is no hub access), drawn
from fixed seeds on one CPU thread, so the same seed and corpus give byte-identical files.

Why these shapes: the CPU attention backend supports head_dim 32 (not smaller); 4 target layers
give a DFlash drafter several target layers to read; untied embeddings and a wider init make the
random target's greedy output depend on its context instead of echoing the last token forever,
so a perturbed copy disagrees with it at a rate that the noise scale controls.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dflashops.lab.models import acceptance, layout, prompts
from dflashops.lab.models.tokenizer import MASK, save_tokenizer, train_tokenizer
from dflashops.progress import Say, quiet

TARGET_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "initializer_range": 0.1,
}
DFLASH_LAYERS = 1
# DFlash semantics: 0-based decoder layers whose outputs feed the drafter (vLLM adds 1).
DFLASH_TARGET_LAYER_IDS = (0, 1, 2)
NUM_SPECULATIVE_TOKENS = 4
DFLASH_BLOCK_SIZE = NUM_SPECULATIVE_TOKENS + 1

# The decaying draft: the target with Gaussian noise on its upper layers' matrices, the noise
# scale (relative to each matrix's std) chosen from these candidates to come closest to the aim.
# Acceptance falls as the scale grows, so the search stops once the error rose twice in a row.
# Given a matching prefix the draft sees the target's own context, so each position is accepted
# with about the same chance and the cumulative rates fall about geometrically (p, p², p³, p⁴):
# 0.8 at position 0 with 0.2 at position 3 is out of reach for a perturbed copy, and the search
# lands in between (about 0.72 / 0.28 offline, 0.78 / 0.32 on the vLLM CPU server).
DECAY_LAYERS = (2, 3)
DECAY_AIM = {0: 0.8, 3: 0.2}
DECAY_SCALES = (0.05, 0.065, 0.08, 0.095, 0.11, 0.13, 0.16, 0.2, 0.25)
DECAY_MAX_NEW_TOKENS = 32

SEED_TARGET = 0
SEED_DFLASH = 1
SEED_DECAY = 2


def _torch() -> Any:
    import torch  # type: ignore[import-not-found, unused-ignore]

    return torch


def _deterministic() -> None:
    torch = _torch()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def _bf16_copy(model: Any) -> Any:
    import copy

    return copy.deepcopy(model).to(_torch().bfloat16)


def _save_model(model: Any, tokenizer: Any, path: Path) -> None:
    _bf16_copy(model).save_pretrained(str(path))
    save_tokenizer(tokenizer, path)


def build_target(tokenizer: Any, seed: int) -> Any:
    """A random Qwen3ForCausalLM (float32 in memory) sized by ``TARGET_SHAPE``."""
    torch = _torch()
    from transformers import (  # type: ignore[import-not-found, unused-ignore]
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    torch.manual_seed(seed + SEED_TARGET)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.pad_token_id,
        **TARGET_SHAPE,
    )
    return Qwen3ForCausalLM(config).eval()


def perturbed_copy(model: Any, layers: Sequence[int], scale: float, seed: int) -> Any:
    """A copy of ``model`` with noise ``scale × std(W)`` added to every matrix of ``layers``."""
    import copy

    torch = _torch()
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed + SEED_DECAY)
    prefixes = tuple(f"model.layers.{i}." for i in layers)
    with torch.no_grad():
        for name, param in sorted(draft.named_parameters()):
            if param.dim() == 2 and name.startswith(prefixes):
                noise = torch.randn(param.shape, generator=generator)
                param.add_(noise * scale * param.std())
    return draft


def calibrate_decay(
    target: Any, prompt_ids: Sequence[Sequence[int]], seed: int, progress: Say
) -> tuple[float, list[dict[str, Any]]]:
    """Pick the noise scale whose acceptance comes closest to ``DECAY_AIM`` (bf16, like vLLM)."""
    target_bf16 = _bf16_copy(target)
    trials: list[dict[str, Any]] = []
    for scale in DECAY_SCALES:
        draft = _bf16_copy(perturbed_copy(target, DECAY_LAYERS, scale, seed))
        result = acceptance.simulate(
            target_bf16,
            draft,
            prompt_ids,
            k=NUM_SPECULATIVE_TOKENS,
            max_new_tokens=DECAY_MAX_NEW_TOKENS,
        )
        rates = result.per_position
        error = sum((rates[pos] - aim) ** 2 for pos, aim in DECAY_AIM.items())
        trials.append(
            {
                "scale": scale,
                "per_position": [round(r, 4) for r in rates],
                "num_drafts": result.num_drafts,
                "mean_acceptance_length": round(result.mean_acceptance_length, 4),
                "error": round(error, 6),
            }
        )
        progress(f"decay draft: noise {scale} → per-position {[round(r, 2) for r in rates]}")
        errors = [t["error"] for t in trials]
        if len(errors) >= 3 and errors[-1] > errors[-2] > errors[-3]:
            break
    best = min(trials, key=lambda t: (t["error"], t["scale"]))
    return float(best["scale"]), trials


def write_dflash(target_dir: Path, out: Path, seed: int) -> None:
    """A random ``DFlashDraftModel`` that vLLM accepts for the target in ``target_dir``.

    Layout as vLLM's ``qwen3_dflash`` loads it: no ``model.`` prefix, no embed/lm_head (shared
    from the target), ``fc.weight`` of ``[hidden, hidden × len(target_layer_ids)]``.
    """
    torch = _torch()
    from safetensors.torch import save_file  # type: ignore[import-not-found, unused-ignore]

    tc = json.loads((target_dir / "config.json").read_text(encoding="utf-8"))
    tokenizer = json.loads((target_dir / "tokenizer.json").read_text(encoding="utf-8"))
    mask_id = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == MASK)
    hidden, inter, head_dim = tc["hidden_size"], tc["intermediate_size"], tc["head_dim"]
    heads, kv_heads = tc["num_attention_heads"], tc["num_key_value_heads"]
    config = {
        key: value
        for key, value in tc.items()
        if key not in ("transformers_version", "tie_word_embeddings", "layer_types")
    }
    config.update(
        {
            "architectures": ["DFlashDraftModel"],
            "num_hidden_layers": DFLASH_LAYERS,
            # full_attention → non-causal in vLLM; mixed sliding/full needs the V2 runner (no CPU)
            "layer_types": ["full_attention"] * DFLASH_LAYERS,
            "num_target_layers": tc["num_hidden_layers"],
            "block_size": DFLASH_BLOCK_SIZE,
            "tie_word_embeddings": False,
            "dflash_config": {
                "mask_token_id": mask_id,
                "target_layer_ids": list(DFLASH_TARGET_LAYER_IDS),
            },
        }
    )
    generator = torch.Generator().manual_seed(seed + SEED_DFLASH)

    def rand(*shape: int) -> Any:
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    def ones(n: int) -> Any:
        return torch.ones(n, dtype=torch.bfloat16)

    weights: dict[str, Any] = {
        "fc.weight": rand(hidden, hidden * len(DFLASH_TARGET_LAYER_IDS)),
        "hidden_norm.weight": ones(hidden),
        "norm.weight": ones(hidden),
    }
    for layer in range(DFLASH_LAYERS):
        p = f"layers.{layer}."
        weights |= {
            p + "input_layernorm.weight": ones(hidden),
            p + "post_attention_layernorm.weight": ones(hidden),
            p + "self_attn.q_proj.weight": rand(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": rand(hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": ones(head_dim),
            p + "self_attn.k_norm.weight": ones(head_dim),
            p + "mlp.gate_proj.weight": rand(inter, hidden),
            p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter),
        }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(dict(sorted(weights.items())), str(out / "model.safetensors"), {"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (target_dir / name).is_file():
            shutil.copyfile(target_dir / name, out / name)


def build_all(out_dir: Path, seed: int = 0, progress: Say | None = None) -> layout.LabModels:
    """Build every lab model into ``out_dir`` (replacing what is there); write the manifest last."""
    say = progress or quiet
    _deterministic()
    from transformers.utils import logging as hf_logging  # type: ignore[import-not-found, unused-ignore]

    hf_logging.disable_progress_bar()
    torch = _torch()
    models = layout.LabModels(Path(out_dir))
    models.root.mkdir(parents=True, exist_ok=True)
    models.manifest.unlink(missing_ok=True)
    for name in (layout.TARGET, layout.DFLASH, layout.DRAFT_IDENTICAL, layout.DRAFT_DECAY):
        shutil.rmtree(models.root / name, ignore_errors=True)

    say("training the tokenizer on the corpus")
    tokenizer = train_tokenizer()

    say("building the target (random Qwen3)")
    target = build_target(tokenizer, seed)
    # Round-trip through bf16 first: what vLLM serves is the bf16 checkpoint, and the decaying
    # draft's noise is added to exactly those weights.
    target = target.to(torch.bfloat16).to(torch.float32)
    _save_model(target, tokenizer, models.target)
    _save_model(target, tokenizer, models.draft_identical)

    say("writing prompts")
    records = prompts.build_prompts(seed)
    models.prompts.write_text(prompts.dump_jsonl(records), encoding="utf-8")

    say("calibrating the decaying draft")
    prompt_ids = [
        tokenizer(r["prompt"])["input_ids"] for r in records if r["kind"] == prompts.KIND_DECAY
    ]
    scale, trials = calibrate_decay(target, prompt_ids, seed, say)
    draft = perturbed_copy(target, DECAY_LAYERS, scale, seed)
    _save_model(draft, tokenizer, models.draft_decay)
    chosen = next(t for t in trials if t["scale"] == scale)
    report = {
        "method": "greedy speculative decoding, bf16, transformers (offline)",
        "k": NUM_SPECULATIVE_TOKENS,
        "max_new_tokens": DECAY_MAX_NEW_TOKENS,
        "prompts": len(prompt_ids),
        "aim": {str(pos): rate for pos, rate in DECAY_AIM.items()},
        "perturbed_layers": list(DECAY_LAYERS),
        "chosen_scale": scale,
        "per_position": chosen["per_position"],
        "trials": trials,
    }
    models.acceptance.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    say("building the DFlash drafter")
    write_dflash(models.target, models.dflash, seed)

    for path in models.root.rglob("*"):
        # readable by a container's root too (unprivileged LXC maps it to another uid)
        path.chmod(0o755 if path.is_dir() else 0o644)
    manifest = {
        "format_version": layout.FORMAT_VERSION,
        "seed": seed,
        "corpus_sha256": layout.corpus_sha256(),
        "files": layout.tree_digest(models.root, exclude=(layout.MANIFEST,)),
    }
    models.manifest.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    say(f"done: {models.root}")
    return models
