"""Model folders for the 27B-shaped GPU runs (issue 23's TP=1 vs TP=2, issue 22's guessed vs
corrected drafter config), made here and carried to the GPU host next to gpu_models.py's.

`python benchmarks/gpu_dense27.py OUT_DIR` writes three folders, all for ``--load-format dummy``
(vLLM makes random weights; header-only ``model.safetensors`` let the preflight's file and shape
checks see what a real checkpoint declares):

- ``target27``: a dense Qwen3 of Qwen3.6-27B's size — 64 layers, hidden 5120, the registry's
  vocabulary of 248,320 (26.7 B parameters, 53.5 GB in bf16). vLLM 0.26 is not known to serve
  Qwen3.6's hybrid (linear + full attention) architecture, so a dense Qwen3 stands in, as issue
  23 allows;
- ``drafter27``: the z-lab Qwen3.6-27B DFlash drafter's shape with the registry's corrected keys
  (4 × sliding_attention + full_attention, target layers 1, 16, 31, 46, 61, mask 248070);
- ``drafter27-guessed``: the same weights' shape with the incident's guessed config (every layer
  full_attention, evenly spread wrong target layers, the wrong mask id);
- ``target27h``: Qwen3.6-27B's own architecture, ``Qwen3_5ForConditionalGeneration`` (64 layers,
  3 Gated DeltaNet + 1 full attention per 4, hidden 5120, vocabulary 248,320: the registry's
  target), served text-only with vLLM's ``--language-model-only`` (no vision tower, no
  processor files). The head and intermediate sizes are Qwen3.5-27B's published config as we
  remember it, not read here (no hub): they set the cost of a step, not what is checked.

The tokenizer is a WordLevel one written as JSON (no ``tokenizers`` needed here) that covers
every id, so random weights never sample an id it cannot decode; ``<|mask|>`` and the chat
tokens are special, as in Qwen's own.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_models import drafter_tensors, target_tensors

from dflashops.drafter.registry import load_registry
from dflashops.drafter.safetensors import header_bytes

VOCAB = 248320
SPECIALS = {
    248044: "<|endoftext|>",
    248045: "<|im_start|>",
    248046: "<|im_end|>",
    248070: "<|mask|>",
}
REF = "z-lab/Qwen3.6-27B-DFlash"
GUESSED = {  # what the incident's operator wrote by hand
    "layer_types": ["full_attention"] * 5,
    "target_layer_ids": [12, 25, 38, 51, 63],
    "mask_token_id": 248044,
}

BASE: dict[str, Any] = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 248044,
    "eos_token_id": 248046,
    "dtype": "bfloat16",
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "initializer_range": 0.02,
    "max_position_embeddings": 40960,
    "model_type": "qwen3",
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": VOCAB,
}


def target_config() -> dict[str, Any]:
    return dict(
        BASE,
        architectures=["Qwen3ForCausalLM"],
        num_hidden_layers=64,
        max_window_layers=64,
        num_attention_heads=40,
        intermediate_size=20480,
        layer_types=["full_attention"] * 64,
    )


def hybrid_target_config() -> dict[str, Any]:
    """Qwen3.6-27B's architecture (vLLM's ``Qwen3_5Config``: text_config + vision_config)."""
    text = {
        "model_type": "qwen3_5_text",
        "vocab_size": VOCAB,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 64,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "full_attention_interval": 4,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
        "bos_token_id": 248044,
        "eos_token_id": 248046,
        "dtype": "bfloat16",
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "vision_config": {"out_hidden_size": 5120},
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def hybrid_target_tensors() -> dict[str, Any]:
    """Embedding and head under the names a Qwen3_5ForConditionalGeneration checkpoint uses."""
    return {
        "model.language_model.embed_tokens.weight": ("BF16", (VOCAB, 5120)),
        "lm_head.weight": ("BF16", (VOCAB, 5120)),
    }


def drafter_config(*, guessed: bool) -> dict[str, Any]:
    """The registry entry's certain keys (or the incident's guesses) over a Qwen3 base."""
    keys = {key.path: key.value for key in load_registry().resolve(REF).keys}
    layer_types = GUESSED["layer_types"] if guessed else keys["layer_types"]
    return dict(
        BASE,
        architectures=keys["architectures"],
        num_hidden_layers=keys["num_hidden_layers"],
        num_attention_heads=keys["num_attention_heads"],
        intermediate_size=keys["intermediate_size"],
        layer_types=layer_types,
        use_sliding_window=not guessed,
        sliding_window=None if guessed else keys["sliding_window"],
        max_window_layers=keys["num_hidden_layers"],
        block_size=keys["block_size"],
        num_target_layers=keys["num_target_layers"],
        dflash_config={
            "mask_token_id": GUESSED["mask_token_id"]
            if guessed
            else keys["dflash_config.mask_token_id"],
            "target_layer_ids": GUESSED["target_layer_ids"]
            if guessed
            else keys["dflash_config.target_layer_ids"],
        },
    )


def tokenizer_files() -> dict[str, str]:
    """tokenizer.json (WordLevel, whitespace) and tokenizer_config.json covering every id."""
    vocab = {f"w{i}": i for i in range(VOCAB) if i not in SPECIALS}
    vocab |= {text: i for i, text in SPECIALS.items()}
    added = [
        {
            "id": i,
            "content": text,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, text in sorted(SPECIALS.items())
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "w0",
        "model_max_length": 40960,
    }
    return {"tokenizer.json": json.dumps(tokenizer), "tokenizer_config.json": json.dumps(config)}


def write_folder(folder: Path, config: dict[str, Any], tensors: dict[str, Any]) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for name, text in tokenizer_files().items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "model.safetensors").write_bytes(header_bytes(tensors))


def main() -> int:
    out = Path(sys.argv[1])
    target = target_config()
    for name in ("target27", "target27h", "drafter27", "drafter27-guessed"):
        shutil.rmtree(out / name, ignore_errors=True)
    write_folder(out / "target27", target, target_tensors(target))
    write_folder(out / "target27h", hybrid_target_config(), hybrid_target_tensors())
    for name, guessed in (("drafter27", False), ("drafter27-guessed", True)):
        config = drafter_config(guessed=guessed)
        write_folder(out / name, config, drafter_tensors(config, target))
    print(f"27B-shaped models in {out}: target27, target27h, drafter27, drafter27-guessed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
