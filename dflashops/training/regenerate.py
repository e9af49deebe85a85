"""The data stage: the target's own answers to the training prompts, from its running server.

A drafter learns to predict what the target writes, so every assistant turn of every sample is
written again by the target, turn by turn, each conditioned on the target's own earlier turns
(as the ``speculators`` library's response regeneration does). Temperature and thinking mode
are the run's: a drafter trained without thinking is wrong for a thinking workload, and the
reverse.

The output is JSONL, one line per finished sample, in the conversation layout the
``speculators`` library's data preparation reads::

    {"id": "…", "conversations": [{"role": "user", "content": "…"},
                                  {"role": "assistant", "content": "…"}]}

(an assistant turn also carries ``reasoning_content`` when the server splits the thinking out).
Each line is appended and flushed as its sample finishes, so an interrupted run keeps what it
did; a rerun reads the file, drops a line cut short by the interruption, and regenerates only
the samples it lacks. Requests run ``concurrency`` at a time; a request that fails for a
transient reason (connection, timeout, HTTP 429 or 5xx) is tried again, anything else stops the
stage with the server's own message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from dflashops.errors import DflashopsError
from dflashops.progress import Say, quiet
from dflashops.training.dataset import Sample, Turn

ATTEMPTS = 4
BACKOFF_S = 1.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class RegenerationError(DflashopsError):
    """The data stage stopped; what it finished is kept in its output file."""


@dataclass(frozen=True)
class RegenerationSettings:
    """How the target answers: the served model, sampling, thinking mode and concurrency."""

    base_url: str
    model: str
    temperature: float = 0.0
    max_tokens: int = 2048
    thinking: bool | None = None
    concurrency: int = 8
    api_key: str | None = None
    timeout_s: float = 600.0


@dataclass(frozen=True)
class RegenerationResult:
    output: Path
    total: int
    already_done: int
    regenerated: int


def regenerate(
    samples: Sequence[Sample],
    output: Path,
    settings: RegenerationSettings,
    *,
    say: Say = quiet,
    backoff_s: float = BACKOFF_S,
) -> RegenerationResult:
    """Write the target's conversation for every sample not yet in ``output``."""
    done = finished_ids(output)
    todo = [s for s in samples if s.id not in done]
    say(f"data: {len(samples) - len(todo)} of {len(samples)} samples already regenerated")
    if todo:
        asyncio.run(_run(todo, output, settings, say, backoff_s))
    return RegenerationResult(output, len(samples), len(samples) - len(todo), len(todo))


def finished_ids(output: Path) -> set[str]:
    """The ids of the samples ``output`` holds; a last line cut short by an interruption is
    removed from the file first (the sample is done again)."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        with output.open("r+b") as handle:
            handle.truncate(keep)
    ids = set()
    for number, line in enumerate(data[:keep].splitlines(), 1):
        try:
            ids.add(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            raise RegenerationError(
                f"{output}:{number}: not a line this stage wrote",
                hint="remove the file, or point the run at another output",
            ) from None
    return ids


async def _run(
    todo: Sequence[Sample], output: Path, settings: RegenerationSettings, say: Say, backoff: float
) -> None:
    limit = asyncio.Semaphore(settings.concurrency)
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    finished = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    async with httpx.AsyncClient(
        base_url=settings.base_url.rstrip("/").removesuffix("/v1"),
        headers=headers,
        timeout=settings.timeout_s,
        limits=httpx.Limits(max_connections=settings.concurrency),
    ) as client:
        with output.open("a", encoding="utf-8") as sink:

            async def one(sample: Sample) -> None:
                nonlocal finished
                async with limit:
                    turns = await _conversation(client, sample, settings, backoff)
                line = {"id": sample.id, "conversations": turns}
                sink.write(json.dumps(line, ensure_ascii=False) + "\n")
                sink.flush()  # a killed run keeps every finished sample
                finished += 1
                say(f"data: {finished}/{len(todo)} regenerated")

            tasks = [asyncio.create_task(one(sample)) for sample in todo]
            try:
                await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise


async def _conversation(
    client: httpx.AsyncClient, sample: Sample, settings: RegenerationSettings, backoff: float
) -> list[dict[str, Any]]:
    """The sample with every assistant turn written by the target, in order."""
    history: list[dict[str, Any]] = []
    for turn in sample.turns:
        if turn.role == "assistant":
            history.append(await _reply(client, history, sample.id, settings, backoff))
        else:
            history.append(_message(turn))
    if sample.turns[-1].role != "assistant":
        history.append(await _reply(client, history, sample.id, settings, backoff))
    return history


def _message(turn: Turn) -> dict[str, Any]:
    return {"role": turn.role, "content": turn.content}


async def _reply(
    client: httpx.AsyncClient,
    history: list[dict[str, Any]],
    sample_id: str,
    settings: RegenerationSettings,
    backoff: float,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in history],
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
    }
    if settings.thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": settings.thinking}
    problem = ""
    for attempt in range(ATTEMPTS):
        if attempt:
            await asyncio.sleep(backoff * 2 ** (attempt - 1))
        try:
            response = await client.post("/v1/chat/completions", json=body)
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}".rstrip(": ")
            continue
        if response.status_code in TRANSIENT_STATUS:
            problem = f"HTTP {response.status_code}"
            continue
        if response.status_code != 200:
            raise RegenerationError(
                f"sample {sample_id}: HTTP {response.status_code} from the target: "
                f"{_error_text(response)}"
            )
        return _assistant(response, sample_id)
    raise RegenerationError(
        f"sample {sample_id}: no answer after {ATTEMPTS} attempts (last: {problem})",
        hint="is the target's server up? a rerun continues where this one stopped",
    )


def _assistant(response: httpx.Response, sample_id: str) -> dict[str, Any]:
    try:
        message = response.json()["choices"][0]["message"]
        content = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise RegenerationError(
            f"sample {sample_id}: the target's reply is not a chat completion"
        ) from None
    turn: dict[str, Any] = {"role": "assistant", "content": str(content)}
    if reasoning:
        turn["reasoning_content"] = str(reasoning)
    return turn


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
        text = error.get("message") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        text = response.text
    return " ".join(str(text or response.reason_phrase).split())[:200]
