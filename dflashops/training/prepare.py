"""The prepare stage: the target's conversations as tokens, loss masks and hidden states, written
exactly as ``speculators`` 0.9.0 writes them for offline training.

``speculators`` builds these files in two steps: ``prepare-data`` renders each conversation
through the target's vLLM ``/render`` endpoint, and ``generate-offline-data`` runs every row
through a vLLM server launched for hidden-state extraction (its ``extract_hidden_states``
connector, which uses CUDA streams: it cannot run on a CPU). Here both steps are the smallest
step of our own: the target's chat template applied by its tokenizer (``transformers``), and
the target itself run by ``transformers`` (on the CPU, or CUDA where ``train.device`` finds
one). The output is what those commands write, so ``speculators``' own dataset class
(``speculators.train.data.ArrowDataset`` with a ``FileTransfer``) reads it unchanged:

``data/prepared/`` — a ``datasets`` Arrow dataset (``save_to_disk``, torch format), one row per
assistant turn (``prepare-data``'s fan-out), columns ``input_ids`` (int32 in Arrow, int64 when
read), ``loss_mask`` (int64: 1 on the turn's own tokens, from the end of the generation prompt
to the end of the turn, 0 on the context before it; the ``/render`` boundary rule, with its
common-prefix fallback for templates whose generation prompt differs) and ``seq_len`` (int64).
Rows are cut to ``train.seq_len`` tokens; a turn whose context alone fills it is skipped, and so
is a row with nothing to learn.

``data/prepared/hidden_states/hs_<row>.safetensors`` — what the extraction connector writes:
``hidden_states`` ``[seq_len, len(target_layer_ids) + 1, hidden_size]`` and ``token_ids``
``[seq_len]`` (int64). Slot j < n is the output of target decoder layer ``target_layer_ids[j]``
(0-based, DFlash semantics: vLLM's aux layer id ``target_layer_ids[j] + 1``, transformers'
``hidden_states[target_layer_ids[j] + 1]``); the last slot is the last decoder layer's output
before the final norm (vLLM's id ``num_hidden_layers``; the draft model applies the verifier's
norm itself — transformers' ``hidden_states[-1]`` is after the norm, so the layers' outputs
are captured with forward hooks). Float32 on the CPU; on CUDA the target's own dtype, as the
server would write.

Resumable per row: a file whose tokens and shape match its row is kept, others are computed
again (each is written to a temporary name and renamed). ``data/prepared/dflashops.json``
records the target, layers and settings the files were made with; when they change, every row
is computed again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflashops.errors import DflashopsError
from dflashops.progress import Say
from dflashops.training.job import TrainingJob

HIDDEN_STATES_DIR = "hidden_states"
RECORD_FILE = "dflashops.json"
DATASET_FILES = ("data-00000-of-00001.arrow", "dataset_info.json", "state.json")
PROGRESS_EVERY_S = 10.0


class PrepareError(DflashopsError):
    """The regenerated conversations cannot be turned into training rows."""


@dataclass(frozen=True)
class Row:
    """One training row: a conversation through one assistant turn."""

    conversation: str
    input_ids: list[int]
    loss_mask: list[int]


def prepare_data(job: TrainingJob, say: Say) -> dict[str, Any]:
    """Tokenize the regenerated conversations and compute the target's hidden states."""
    from transformers import AutoTokenizer  # type: ignore[import-not-found, unused-ignore]

    out = Path(job.paths.prepared)
    conversations = read_conversations(Path(job.paths.regenerated))
    tokenizer = AutoTokenizer.from_pretrained(job.target)
    rows, unusable = [], 0
    for conv_id, turns in conversations:
        try:
            rows += boundary_rows(tokenizer, conv_id, turns, job.train.seq_len, job.data.thinking)
        except PrepareError as exc:
            unusable += 1
            say(f"prepare: skipping conversation {conv_id}: {exc.message}")
    if len(rows) < 2:
        raise PrepareError(
            f"{len(rows)} training row(s) from {len(conversations)} conversations; speculators "
            "needs at least 2 (one is held out for validation)",
            hint="regenerate more samples (data.max_samples) or raise train.seq_len",
        )
    say(f"prepare: {len(rows)} rows from {len(conversations)} conversations")
    _save_dataset(rows, out)

    device = torch_device(job.train.device)
    record = {
        "target": str(Path(job.target).resolve()),
        "target_layer_ids": list(job.drafter.target_layer_ids),
        "seq_len": job.train.seq_len,
        "thinking": job.data.thinking,
        "device": device,
    }
    states = out / HIDDEN_STATES_DIR
    states.mkdir(parents=True, exist_ok=True)
    same_setup = _read_record(out) == record
    (out / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    todo = [
        i
        for i, row in enumerate(rows)
        if not (same_setup and _valid_file(states / f"hs_{i}.safetensors", row.input_ids))
    ]
    say(f"prepare: hidden states: {len(rows) - len(todo)} of {len(rows)} rows already done")
    if todo:
        _extract(job, rows, todo, states=states, device=device, say=say)
    return {
        "conversations": len(conversations),
        "unusable_conversations": unusable,
        "rows": len(rows),
        "tokens": sum(len(r.input_ids) for r in rows),
        "supervised_tokens": sum(sum(r.loss_mask) for r in rows),
        "hidden_states_computed": len(todo),
        "hidden_states_reused": len(rows) - len(todo),
        "device": device,
        "dtype": _file_dtype(states / "hs_0.safetensors"),
        "output": str(out),
    }


def read_conversations(path: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """The data stage's conversations, in file order (append-only, so a grown file keeps the
    row numbers of what was there)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PrepareError(
            f"cannot read {path}: {exc.strerror or exc}", hint="run the data stage first"
        ) from None
    conversations = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            turns = data["conversations"]
            conv_id = str(data["id"])
            if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
                raise TypeError("conversations is not a list of turns")
        except (ValueError, KeyError, TypeError) as exc:
            raise PrepareError(f"{path}:{number}: not a regenerated conversation ({exc})") from None
        conversations.append((conv_id, turns))
    if not conversations:
        raise PrepareError(f"{path}: no conversations", hint="run the data stage first")
    return conversations


def boundary_rows(
    tokenizer: Any,
    conv_id: str,
    turns: Sequence[dict[str, Any]],
    max_len: int,
    thinking: bool | None,
) -> list[Row]:
    """One row per assistant turn, masked where its render extends the generation prompt
    (``speculators.data_generation.preprocessing._render_boundary_rows``, with the tokenizer's
    chat template in place of vLLM's ``/render``)."""
    conv = [_message(turn) for turn in turns]
    kwargs = {} if thinking is None else {"enable_thinking": thinking}

    def render(prefix: list[dict[str, Any]], generation_prompt: bool) -> list[int]:
        ids = tokenizer.apply_chat_template(
            prefix, tokenize=True, add_generation_prompt=generation_prompt, **kwargs
        )
        ids = ids["input_ids"] if not isinstance(ids, list) else ids
        return [int(i) for i in ids][:max_len]

    rows = []
    for j, turn in enumerate(conv):
        if turn["role"] != "assistant" or j == 0:
            continue
        prompt = render(conv[:j], True)
        if len(prompt) >= max_len:
            continue  # only the context fits; a later turn may fit again
        full = render(conv[: j + 1], False)
        boundary = len(prompt)
        if full[:boundary] != prompt:
            boundary = next(
                (k for k, (a, b) in enumerate(zip(prompt, full, strict=False)) if a != b), 0
            )
            history = render(conv[:j], False)
            if full[: len(history)] != history or boundary < len(history):
                raise PrepareError(f"the chat template renders turn {j}'s history differently")
        mask = [0] * boundary + [1] * (len(full) - boundary)
        if sum(mask):
            rows.append(Row(conv_id, full, mask))
    return rows


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def torch_device(setting: str) -> str:
    """``cpu`` or ``cuda`` for a ``train.device`` setting (``auto``: CUDA when torch sees it)."""
    if setting == "cpu":
        return "cpu"
    available = bool(_torch().cuda.is_available())
    if setting == "cuda" and not available:
        raise PrepareError("train.device is cuda, but torch sees no CUDA device")
    return "cuda" if available else "cpu"


def _message(turn: dict[str, Any]) -> dict[str, Any]:
    """A turn as the chat template reads it (speculators' normalized turn: the thinking under
    both names templates use)."""
    role = {"human": "user", "gpt": "assistant"}.get(turn.get("role", ""), turn.get("role"))
    message: dict[str, Any] = {"role": role, "content": turn.get("content") or ""}
    thinking = turn.get("reasoning_content") or turn.get("thinking")
    if thinking:
        message["reasoning_content"] = message["thinking"] = thinking
    return message


def _save_dataset(rows: Sequence[Row], out: Path) -> None:
    from datasets import Dataset  # type: ignore[import-not-found, unused-ignore]

    out.mkdir(parents=True, exist_ok=True)
    for name in DATASET_FILES:
        (out / name).unlink(missing_ok=True)
    dataset = Dataset.from_dict(
        {
            "input_ids": [r.input_ids for r in rows],
            "loss_mask": [r.loss_mask for r in rows],
            "seq_len": [len(r.input_ids) for r in rows],
        }
    )
    dataset.set_format(type="torch")
    dataset.save_to_disk(str(out))


def _read_record(out: Path) -> Any:
    try:
        return json.loads((out / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _valid_file(path: Path, input_ids: list[int]) -> bool:
    """The file is readable and holds hidden states for exactly these tokens."""
    from safetensors import safe_open  # type: ignore[import-not-found, unused-ignore]

    if not path.exists():
        return False
    try:
        with safe_open(str(path), framework="pt") as handle:
            tokens = handle.get_tensor("token_ids").tolist()
            shape = handle.get_slice("hidden_states").get_shape()
    except Exception:  # a file cut short by an interruption: computed again
        return False
    return bool(tokens == input_ids and shape[0] == len(input_ids))


def _file_dtype(path: Path) -> str:
    """The hidden states' dtype as torch names it (``float32``, ``bfloat16``)."""
    from safetensors import safe_open  # type: ignore[import-not-found, unused-ignore]

    with safe_open(str(path), framework="pt") as handle:
        dtype = str(handle.get_slice("hidden_states").get_dtype())
    return {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}.get(dtype, dtype.lower())


def _extract(
    job: TrainingJob,
    rows: Sequence[Row],
    todo: Sequence[int],
    *,
    states: Path,
    device: str,
    say: Say,
) -> None:
    """Run the target over the rows in ``todo`` and write their hidden-state files."""
    torch = _torch()
    from safetensors.torch import save_file  # type: ignore[import-not-found, unused-ignore]
    from transformers import AutoModelForCausalLM  # type: ignore[import-not-found, unused-ignore]

    dtype = torch.float32 if device == "cpu" else "auto"
    model = AutoModelForCausalLM.from_pretrained(job.target, dtype=dtype).to(device).eval()
    decoder = model.get_decoder()
    last = len(decoder.layers) - 1
    layers = [*job.drafter.target_layer_ids, last]
    if not all(0 <= layer <= last for layer in layers):
        raise PrepareError(
            f"target_layer_ids {list(job.drafter.target_layer_ids)} must lie in [0, {last}] "
            f"for a target of {last + 1} layers"
        )
    say(f"prepare: running the target on {device} for {len(todo)} rows (layers {layers})")
    started = last_said = time.monotonic()
    with _LayerOutputs(decoder, layers) as captured, torch.inference_mode():
        for done, index in enumerate(todo, 1):
            ids = torch.tensor([rows[index].input_ids], dtype=torch.long, device=device)
            decoder(input_ids=ids, use_cache=False)
            hidden = torch.stack([captured[layer][0] for layer in layers], dim=1)
            path = states / f"hs_{index}.safetensors"
            partial = path.with_name(path.name + ".partial")
            tensors = {"hidden_states": hidden.contiguous().cpu(), "token_ids": ids[0].cpu()}
            save_file(tensors, str(partial))
            partial.replace(path)
            if time.monotonic() - last_said > PROGRESS_EVERY_S or done == len(todo):
                last_said = time.monotonic()
                say(f"prepare: hidden states {done}/{len(todo)} ({last_said - started:.0f} s)")


class _LayerOutputs:
    """Forward hooks that keep each named decoder layer's output (the residual stream after it)."""

    def __init__(self, decoder: Any, layers: Sequence[int]) -> None:
        self.decoder, self.layers = decoder, sorted(set(layers))
        self.captured: dict[int, Any] = {}
        self.handles: list[Any] = []

    def __enter__(self) -> dict[int, Any]:
        for index in self.layers:
            self.handles.append(
                self.decoder.layers[index].register_forward_hook(self._keeper(index))
            )
        return self.captured

    def _keeper(self, index: int) -> Any:
        def keep(_module: Any, _args: Any, output: Any) -> None:
            self.captured[index] = output[0] if isinstance(output, tuple) else output

        return keep

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()


def _torch() -> Any:
    import torch  # type: ignore[import-not-found, unused-ignore]

    return torch
