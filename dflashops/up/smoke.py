"""The ``smoke`` step: one chat request to the server ``launch`` started, and its spec-decode
counters, before a whole benchmark is spent on a server that does not answer or does not draft."""

from __future__ import annotations

import os

import httpx

from dflashops.deployment.api_key import server_api_key
from dflashops.metrics.spec_decode import SpecDecodeCounters
from dflashops.playbook.models import Playbook
from dflashops.up.outputs import SmokeOutput, SpecDecodeCounts
from dflashops.up.record import UpError

SMOKE_PROMPT = "Explain the theory of general relativity in detail."
SMOKE_MAX_TOKENS = 48
SMOKE_TIMEOUT_S = 120.0


def smoke_request(endpoint: str, playbook: Playbook) -> SmokeOutput:
    """Send the request (temperature 0); the reply, its usage and the counters after it."""
    base = endpoint.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    key = server_api_key(playbook.server.api_key_env, os.environ, whose=f"playbook {playbook.name}")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {
        "model": playbook.served_name,
        "messages": [{"role": "user", "content": SMOKE_PROMPT}],
        "max_tokens": SMOKE_MAX_TOKENS,
        "temperature": 0,
    }
    try:
        with httpx.Client(timeout=SMOKE_TIMEOUT_S, headers=headers) as client:
            reply = client.post(f"{base}/chat/completions", json=body)
            reply.raise_for_status()
            data = reply.json()
            metrics = client.get(f"{base.removesuffix('/v1')}/metrics").text
        content = str(data["choices"][0]["message"]["content"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise UpError(
            f"smoke request to {base}: {type(exc).__name__}: {exc}",
            hint="see the server log: `dflashops logs NAME`",
        ) from None
    out = SmokeOutput(reply=content, usage=dict(data.get("usage") or {}))
    # the request has finished, so SGLang's per-request spec counters have moved too
    if playbook.drafter.method != "none":
        counters = SpecDecodeCounters.from_scrape(metrics)
        if not counters.spec_decode:
            family = "vllm:spec_decode_*" if playbook.engine.name == "vllm" else "sglang:spec_*"
            raise UpError(
                f"the server at {base} exposes no {family} metrics: speculation is off",
                hint="check the launch's --speculative-config (`dflashops status NAME`)",
            )
        out.spec_decode = SpecDecodeCounts(
            num_drafts=counters.num_drafts,
            draft_tokens=counters.num_draft_tokens,
            accepted_tokens=counters.num_accepted_tokens,
        )
    return out
