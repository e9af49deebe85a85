"""Model folders for the issue-22 GPU run, made here and carried to the GPU host.

`python benchmarks/gpu_models.py PACK_MODELS_DIR OUT_DIR` copies the Qwen3-8B-shaped target and
DFlash drafter configs that ``../shared/gpu/models.py`` wrote (dummy weights: vLLM makes random
ones) and makes them pass the bundled server's preflight honestly:

- the tokenizer marks ``<|im_start|>`` (151644) and the DFlash mask ``<|mask|>`` (151669) as
  special added tokens, as Qwen3's own tokenizer does; the recipe's WordLevel tokenizer had them
  as ordinary vocabulary, which the drafter check rightly refuses as a mask id;
- each folder gets a header-only ``model.safetensors`` (names and shapes, no data) so the
  file checks and the drafter's shape checks (``fc.weight`` is [hidden, 5 × target hidden]) see
  what a real checkpoint declares. ``--load-format dummy`` never reads it.

The lab's tiny target and trained DFlash drafter (real weights) are copied as they are.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

from dflashops.drafter.safetensors import header_bytes

LAB_MODELS = Path.home() / ".cache" / "dflashops" / "lab" / "models"
SPECIALS = {151644: "<|im_start|>", 151669: "<|mask|>"}


def _special_entry(token_id: int, content: str) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def mark_specials(tokenizer_json: Path) -> None:
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    added = {entry["id"]: entry for entry in data.get("added_tokens", [])}
    for token_id, content in SPECIALS.items():
        added[token_id] = _special_entry(token_id, content)
    data["added_tokens"] = [added[i] for i in sorted(added)]
    tokenizer_json.write_text(json.dumps(data), encoding="utf-8")


def drafter_tensors(config: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """What a DFlash drafter checkpoint of this config declares (names as vLLM loads them)."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config["num_key_value_heads"]
    head_dim, inter = config["head_dim"], config["intermediate_size"]
    taps = len(config["dflash_config"]["target_layer_ids"])
    tensors: dict[str, Any] = {
        "fc.weight": ("BF16", (hidden, taps * target["hidden_size"])),
        "hidden_norm.weight": ("BF16", (hidden,)),
        "norm.weight": ("BF16", (hidden,)),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}"
        tensors |= {
            f"{p}.input_layernorm.weight": ("BF16", (hidden,)),
            f"{p}.post_attention_layernorm.weight": ("BF16", (hidden,)),
            f"{p}.self_attn.q_proj.weight": ("BF16", (heads * head_dim, hidden)),
            f"{p}.self_attn.k_proj.weight": ("BF16", (kv * head_dim, hidden)),
            f"{p}.self_attn.v_proj.weight": ("BF16", (kv * head_dim, hidden)),
            f"{p}.self_attn.o_proj.weight": ("BF16", (hidden, heads * head_dim)),
            f"{p}.self_attn.q_norm.weight": ("BF16", (head_dim,)),
            f"{p}.self_attn.k_norm.weight": ("BF16", (head_dim,)),
            f"{p}.mlp.gate_proj.weight": ("BF16", (inter, hidden)),
            f"{p}.mlp.up_proj.weight": ("BF16", (inter, hidden)),
            f"{p}.mlp.down_proj.weight": ("BF16", (hidden, inter)),
        }
    return tensors


def target_tensors(config: dict[str, Any]) -> dict[str, Any]:
    """Only the embedding and head: enough for a file check (the shapes come from config)."""
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    return {
        "model.embed_tokens.weight": ("BF16", (vocab, hidden)),
        "lm_head.weight": ("BF16", (vocab, hidden)),
    }


def write_workloads(folder: Path) -> None:
    """The requests both clients send (`dflashops bench -w` and gpu_client): byte-identical.

    q8b: 16 prompts of 128 vocabulary words (random weights: the text does not matter, its
    length does); tiny: the lab's prompts (the trained drafter's acceptance depends on them).
    """
    folder.mkdir(parents=True)
    rnd = random.Random(22)
    q8b = [
        {"id": f"q{i}", "prompt": " ".join(f"w{rnd.randrange(100, 150000)}" for _ in range(128))}
        for i in range(16)
    ]
    lab = [json.loads(line) for line in (LAB_MODELS / "prompts.jsonl").read_text().splitlines()]
    tiny = [{"id": row["id"], "prompt": row["prompt"]} for row in lab if row.get("prompt")]
    for name, rows in (("q8b", q8b), ("tiny", tiny)):
        text = "".join(json.dumps(row) + "\n" for row in rows)
        (folder / f"{name}.jsonl").write_text(text, encoding="utf-8")


def main() -> int:
    pack, out = Path(sys.argv[1]), Path(sys.argv[2])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    target, drafter = out / "target", out / "drafter"
    shutil.copytree(pack / "target", target)
    shutil.copytree(pack / "drafter", drafter)
    mark_specials(target / "tokenizer.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(target / name, drafter / name)
    target_config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    drafter_config = json.loads((drafter / "config.json").read_text(encoding="utf-8"))
    (target / "model.safetensors").write_bytes(header_bytes(target_tensors(target_config)))
    (drafter / "model.safetensors").write_bytes(
        header_bytes(drafter_tensors(drafter_config, target_config))
    )
    for name in ("tiny-qwen3", "tiny-qwen3-dflash"):
        shutil.copytree(LAB_MODELS / name, out / name)
    write_workloads(out / "workloads")
    print(f"models in {out}: {sorted(p.name for p in out.iterdir())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
