"""The HTTP client of one running vLLM OpenAI server: the completions it samples (as token ids and
their logprobs), its runtime LoRA routes and its sleep-mode routes, with vLLM's errors mapped to
this server's.

A request that cannot reach vLLM raises `Unreachable`, so the engine can ask the process
supervisor whether vLLM died (a 503 while it restarts) before calling it a 502.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from ..base import EngineError

Tokens = tuple[list[int], list[float], list[list[tuple[int, float]]]]

KEEP_ALIVE_S = 30  # how long vLLM's HTTP server keeps an idle connection (VLLM_HTTP_TIMEOUT_KEEP_ALIVE)


class Unreachable(EngineError):
    def __init__(self, error: httpx.HTTPError):
        super().__init__(f"vLLM request failed: {type(error).__name__}: {error}", status=502, code="engine_error")


class VLLMClient:
    def __init__(self, url: str, api_key: str):
        # An idle connection is dropped here well before vLLM's server closes it (KEEP_ALIVE_S, set in
        # process.py): at equal timeouts a request reused a connection just as vLLM closed it, and
        # failed (seen once in the data-parallel test, between a step's rollouts).
        self.http = httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(None, connect=10),
            limits=httpx.Limits(keepalive_expiry=KEEP_ALIVE_S / 3),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self.http.post(path, json=body)
        except httpx.HTTPError as error:
            raise Unreachable(error) from error
        if response.status_code != 200:
            raise error_of(response)
        try:
            return response.json()
        except json.JSONDecodeError:  # the LoRA routes answer in plain text
            return {}

    # -- sampling ------------------------------------------------------------------------------
    async def complete(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """`/v1/completions` (not streamed): its choices in index order."""
        # Cancelled when the client goes away: closing the connection makes vLLM abort the request.
        payload = await self.post("/v1/completions", request)
        return sorted(payload.get("choices", []), key=lambda c: c.get("index", 0))

    async def complete_stream(self, request: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """`/v1/completions` streamed: each chunk's choices as they come."""
        try:
            async with self.http.stream("POST", "/v1/completions", json=request) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise error_of(response)
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        raise EngineError(f"vLLM: {chunk['error'].get('message')}", status=502, code="engine_error")
                    for choice in chunk.get("choices", []):
                        yield choice
        except httpx.HTTPError as error:
            raise Unreachable(error) from error

    # -- adapters and sleep --------------------------------------------------------------------
    async def load_lora(self, name: str, path: str) -> None:
        await self.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    async def unload_lora(self, name: str) -> None:
        await self.post("/v1/unload_lora_adapter", {"lora_name": name})

    async def sleep(self) -> None:
        """Level 1 (CUDA): weights offloaded to CPU, KV cache discarded."""
        await self.post("/sleep?level=1", {})

    async def wake_up(self) -> None:
        await self.post("/wake_up", {})


def sampled_tokens(choice: dict[str, Any]) -> Tokens:
    """A completions choice's sampled ids, their logprobs and their top logprobs (tokens as `token_id:N`)."""
    ids = list(choice.get("token_ids") or [])
    logprobs = choice.get("logprobs") or {}
    values = [float(v) if v is not None else 0.0 for v in (logprobs.get("token_logprobs") or [])]
    tops = [
        [(int(k.split(":", 1)[1]), float(v)) for k, v in (entry or {}).items()] for entry in (logprobs.get("top_logprobs") or [])
    ]
    return ids, values, tops


def error_of(response: httpx.Response) -> EngineError:
    """vLLM's error (either of its two shapes) as this server's: 400, 404 and 413 pass through, the
    rest is vLLM's failure, a 502."""
    try:
        payload = response.json()
        message = payload.get("error", {}).get("message") if isinstance(payload.get("error"), dict) else payload.get("message")
    except (json.JSONDecodeError, AttributeError):
        message = None
    status = response.status_code if response.status_code in (400, 404, 413) else 502
    return EngineError(
        f"vLLM: {message or response.text[:500]}",
        status=status,
        code="model_not_found" if status == 404 else "invalid_value" if status == 400 else "engine_error",
    )
