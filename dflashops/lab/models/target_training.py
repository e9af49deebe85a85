"""Train the tiny target on the shipped corpus, so that what it writes is text a drafter can learn.

A random target's greedy output is noise that depends on every earlier token in no learnable
way; a drafter (DFlash or a smaller copy) then accepts nothing. A few hundred AdamW steps on the
~76k-token corpus make the target continue corpus-like prose and code, and answer a chat turn
the same way (some windows are chat-formatted: the user gives a snippet, the assistant continues
it to the end of its paragraph and closes the turn), so the lab's chat requests and the drafter
training's data stage get text-like answers too.

This is the lab's own fixture model, not a drafter trainer: a plain causal-LM loop in float32
on one CPU thread with fixed seeds, so the same corpus and seed give byte-identical weights.
Runs inside the vLLM venv (needs torch and transformers).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from dflashops.lab.models.layout import read_corpus
from dflashops.lab.models.tokenizer import IM_END, IM_START
from dflashops.progress import Say, quiet

SEQ_LEN = 128
BATCH = 16
STEPS = 300
LR = 3e-3
WARMUP_STEPS = 20
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
INIT_RANGE = 0.02  # the usual init: the random target's wide 0.1 init only slows training
# Every CHAT_EVERY-th row of a batch is a chat turn (the rest are plain corpus windows).
CHAT_EVERY = 4
CHAT_PROMPT_CHARS = (60, 160)
LOG_EVERY = 25
SEED_TRAIN = 10


@dataclass
class TargetTraining:
    """What the loop did: its settings, the loss every ``LOG_EVERY`` steps and its wall time."""

    steps: int = STEPS
    batch: int = BATCH
    seq_len: int = SEQ_LEN
    lr: float = LR
    corpus_tokens: int = 0
    chat_windows: int = 0
    losses: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "AdamW causal-LM, float32, 1 CPU thread (dflashops.lab.models)",
            "steps": self.steps,
            "batch": self.batch,
            "seq_len": self.seq_len,
            "lr": self.lr,
            "warmup_steps": WARMUP_STEPS,
            "corpus_tokens": self.corpus_tokens,
            "chat_windows": self.chat_windows,
            "loss": [{"step": s, "loss": round(v, 4)} for s, v in self.losses],
            "final_loss": round(self.losses[-1][1], 4) if self.losses else None,
        }


def _torch() -> Any:
    import torch  # type: ignore[import-not-found, unused-ignore]

    return torch


def corpus_ids(tokenizer: Any) -> list[list[int]]:
    """Each corpus file as token ids, ending with the end-of-text token."""
    # verbose=False: a whole file is longer than model_max_length, which is fine here (windows)
    return [
        tokenizer(text, verbose=False)["input_ids"] + [tokenizer.pad_token_id]
        for text in read_corpus()
    ]


def chat_windows(tokenizer: Any, seed: int) -> list[list[int]]:
    """Chat-formatted windows of at most ``SEQ_LEN`` tokens: a user turn holding a snippet of a
    paragraph, and an assistant turn that continues the text to the paragraph's end.

    Cut at every paragraph of the corpus that is long enough, so the set is fixed by the corpus
    and ``seed`` alone; a paragraph whose continuation overflows the window stays open (the
    target sees long answers as well as closed ones).
    """
    import random

    rng = random.Random(seed + SEED_TRAIN)
    windows: list[list[int]] = []
    for text in read_corpus():
        for raw in text.split("\n\n"):
            paragraph = raw.strip("\n")
            low, high = CHAT_PROMPT_CHARS
            if len(paragraph) < high + 80:
                continue
            cut = paragraph.find(" ", rng.randrange(low, high))
            if cut < 0:
                continue
            user, answer = paragraph[:cut], paragraph[cut + 1 :]
            chat = f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n{answer}{IM_END}\n"
            ids = tokenizer(chat)["input_ids"]
            windows.append(ids[:SEQ_LEN])
    return windows


def build_batches(tokenizer: Any, seed: int, steps: int = STEPS) -> tuple[Any, Any, TargetTraining]:
    """All ``steps`` batches up front (input ids and label masks), drawn from fixed seeds."""
    torch = _torch()
    report = TargetTraining(steps=steps)
    stream = [t for ids in corpus_ids(tokenizer) for t in ids]
    chats = chat_windows(tokenizer, seed)
    report.corpus_tokens, report.chat_windows = len(stream), len(chats)
    generator = torch.Generator().manual_seed(seed + SEED_TRAIN)
    data = torch.tensor(stream, dtype=torch.long)
    inputs = torch.full((steps, BATCH, SEQ_LEN), tokenizer.pad_token_id, dtype=torch.long)
    valid = torch.zeros((steps, BATCH, SEQ_LEN), dtype=torch.bool)
    starts = torch.randint(0, len(stream) - SEQ_LEN, (steps, BATCH), generator=generator)
    picks = torch.randint(0, len(chats), (steps, BATCH), generator=generator)
    for step in range(steps):
        for row in range(BATCH):
            if row % CHAT_EVERY == CHAT_EVERY - 1:
                ids = chats[int(picks[step, row])]
                inputs[step, row, : len(ids)] = torch.tensor(ids)
                valid[step, row, : len(ids)] = True
            else:
                start = int(starts[step, row])
                inputs[step, row] = data[start : start + SEQ_LEN]
                valid[step, row] = True
    return inputs, valid, report


def train_target(model: Any, tokenizer: Any, seed: int, say: Say = quiet) -> TargetTraining:
    """Train ``model`` (float32, in place) with AdamW on the corpus; return what it did."""
    torch = _torch()
    started = time.monotonic()
    inputs, valid, report = build_batches(tokenizer, seed)
    torch.manual_seed(seed + SEED_TRAIN)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, report.steps)
    )
    model.train()
    for step in range(report.steps):
        ids, mask = inputs[step], valid[step]
        labels = ids.masked_fill(~mask, -100)
        loss = model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        schedule.step()
        if step % LOG_EVERY == 0 or step == report.steps - 1:
            value = loss.item()
            report.losses.append((step, value))
            elapsed = time.monotonic() - started
            say(
                f"training the target: step {step + 1}/{report.steps}, loss {value:.2f}"
                f" ({elapsed:.0f}s)"
            )
    model.eval()
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _lr_factor(step: int, steps: int) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak at ``steps``."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
