"""Build the lab models offline: a tiny Qwen3 target trained on the shipped corpus, an identical
draft, a draft whose per-position acceptance decays, and prompts. The DFlash drafter is trained
from the target afterwards, through the drafter training stages (``dflash_build``).

Runs inside the vLLM venv (torch, transformers, tokenizers and safetensors come with vLLM), as
``python -m dflashops.lab.models OUT``. There is no hub access: the target is trained here
(``target_training``), from fixed seeds on one CPU thread, so the same seed and corpus give
byte-identical files.

Why these shapes: the CPU attention backend supports head_dim 32 (not smaller); 4 target layers
give a DFlash drafter several target layers to read; the input and output embeddings stay untied,
as in the lab's first (random) target, so its shape and its registry entry are unchanged.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dflashops.lab.models import acceptance, layout, prompts, target_training
from dflashops.lab.models.dflash_build import build_dflash
from dflashops.lab.models.layout import NUM_SPECULATIVE_TOKENS
from dflashops.lab.models.tokenizer import save_tokenizer, train_tokenizer
from dflashops.lab.runtime import VllmRuntime
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
}

# The decaying draft: the target with Gaussian noise on its layers' matrices, the noise scale
# (relative to each matrix's std) chosen from these candidates to come closest to the aim.
# Acceptance falls as the scale grows, so the search stops once the error rose twice in a row.
# The trained target is confident (its loss on the corpus is ~0.6), so only noise on every layer,
# about as large as the weights themselves, moves its argmax; noise on the upper layers alone
# (what the random target needed) left acceptance above 0.9 at every position up to a scale of 0.8.
# Given a matching prefix the draft sees the target's own context, so each position is accepted
# with a similar chance and the cumulative rates fall roughly geometrically: 0.8 at position 0
# with 0.2 at position 3 is out of reach for a perturbed copy, and the search lands in between
# (scale 0.75: 0.66 / 0.47 / 0.31 / 0.26 offline, 0.66 / 0.49 / 0.32 / 0.27 on the vLLM server).
DECAY_LAYERS = (0, 1, 2, 3)
DECAY_AIM = {0: 0.8, 3: 0.2}
DECAY_SCALES = (0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0, 1.2)
DECAY_MAX_NEW_TOKENS = 32

SEED_TARGET = 0
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


def _as_served(model: Any) -> Any:
    """A copy as the lab's vLLM runs it: the bf16 checkpoint's weights, computed in float32."""
    return _bf16_copy(model).to(_torch().float32)


def _save_model(model: Any, tokenizer: Any, path: Path) -> None:
    _bf16_copy(model).save_pretrained(str(path))
    save_tokenizer(tokenizer, path)


def build_target(tokenizer: Any, seed: int) -> Any:
    """An untrained Qwen3ForCausalLM (float32 in memory) sized by ``TARGET_SHAPE``."""
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
        initializer_range=target_training.INIT_RANGE,
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
    """Pick the noise scale whose acceptance comes closest to ``DECAY_AIM`` (with the weights
    vLLM serves: bf16 files, float32 compute)."""
    served_target = _as_served(target)
    trials: list[dict[str, Any]] = []
    for scale in DECAY_SCALES:
        draft = _as_served(perturbed_copy(target, DECAY_LAYERS, scale, seed))
        result = acceptance.simulate(
            served_target,
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


def build_all(
    out_dir: Path,
    seed: int = 0,
    progress: Say | None = None,
    *,
    runtime: VllmRuntime | None = None,
) -> layout.LabModels:
    """Build every lab model into ``out_dir`` (replacing what is there); write the manifest last.

    Without ``runtime`` the DFlash drafter is left out (it needs the target served by vLLM) and
    the build has no manifest: it is the deterministic part alone, byte-identical for a seed.
    """
    say = progress or quiet
    models = layout.LabModels(Path(out_dir))
    models.root.mkdir(parents=True, exist_ok=True)
    models.manifest.unlink(missing_ok=True)
    for name in layout.BUILT:
        path = models.root / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    build_target_and_drafts(models, seed, say)
    if runtime is None:
        return models
    build_dflash(models, runtime, seed=seed, say=say)
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


def build_target_and_drafts(models: layout.LabModels, seed: int, say: Say) -> None:
    """The deterministic part: tokenizer, trained target, identical and decaying drafts, prompts."""
    _deterministic()
    from transformers.utils import logging as hf_logging  # type: ignore[import-not-found, unused-ignore]

    hf_logging.disable_progress_bar()
    torch = _torch()
    say("training the tokenizer on the corpus")
    tokenizer = train_tokenizer()

    say("training the target (Qwen3, 4 layers) on the corpus")
    target = build_target(tokenizer, seed)
    trained = target_training.train_target(target, tokenizer, seed, say)
    models.target_training.write_text(
        json.dumps(trained.to_json(), indent=2) + "\n", encoding="utf-8"
    )
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
        "method": "greedy speculative decoding, bf16 weights in float32, transformers (offline)",
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
