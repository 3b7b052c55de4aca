"""The vLLM engine: the real vLLM OpenAI server (`vllm serve`) as a subprocess on a CUDA machine.

Built against vLLM's documented HTTP API and CLI (targets vLLM 0.10.2 and later, where
`return_token_ids` and `--logprobs-mode` exist):

- start: `vllm serve <model dir> --served-model-name <base> --enable-lora --max-lora-rank R
  --enable-sleep-mode --logprobs-mode processed_logprobs --api-key=K --host 127.0.0.1 --port P`,
  with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` (runtime LoRA endpoints) and
  `VLLM_SERVER_DEV_MODE=1` (the /sleep and /wake_up endpoints);
- requests: forwarded to `/v1/chat/completions` with `return_token_ids: true` and `logprobs: true`,
  so every response carries `prompt_token_ids` and per-choice `token_ids` with logprobs of the
  processed (actually sampled) distribution, as the hf engine returns them;
- adapters: `POST /v1/load_lora_adapter {lora_name, lora_path}` / `/v1/unload_lora_adapter`;
- training: `POST /sleep?level=1` before, `POST /wake_up` after.

Not run on a real GPU in this project's CI: it is tested against a stand-in process that speaks the
same protocol (gpu-server/tests/vllm_standin.py). See docs/gpu.md for what has run where.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from ..config import ServerConfig
from .base import Engine, EngineError

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def vllm_argv(command: str) -> list[str] | None:
    """`--vllm-command` as argv, its program found on PATH or beside this Python (a venv's `vllm`
    when the server was started by its python without the venv on PATH); None when not found."""
    argv = shlex.split(command)
    if not argv:
        return None
    found = shutil.which(argv[0]) or shutil.which(argv[0], path=str(Path(sys.executable).parent))
    return [found, *argv[1:]] if found else None


class VLLMEngine(Engine):
    kind = "vllm"

    def __init__(self, base_model: str, process: subprocess.Popen, url: str, api_key: str, context_length: int,
                 log_tail: deque[str]):
        self.base_model = base_model
        self.process = process
        self.url = url
        self.context_length = context_length
        self.log_tail = log_tail
        self.client = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {api_key}"},
                                        timeout=httpx.Timeout(None, connect=10))
        self.adapters: set[str] = set()
        self.sleeping = False
        self._awake = asyncio.Event()
        self._awake.set()

    @classmethod
    def command(cls, config: ServerConfig, base_model: str, path: Path, port: int, api_key: str) -> list[str]:
        return [
            *(vllm_argv(config.vllm_command) or shlex.split(config.vllm_command)), "serve", str(path),
            "--served-model-name", base_model,
            "--host", "127.0.0.1", "--port", str(port),
            f"--api-key={api_key}",  # one argv item: argparse would take a key starting with "-" for a flag
            "--enable-lora", "--max-lora-rank", str(config.vllm_max_lora_rank), "--max-loras", "4",
            "--enable-sleep-mode",
            "--logprobs-mode", "processed_logprobs",
            "--gpu-memory-utilization", str(config.vllm_gpu_memory_utilization),
            *shlex.split(config.vllm_args),
        ]

    @classmethod
    async def start(cls, config: ServerConfig, base_model: str, path: Path) -> VLLMEngine:
        port = free_port()
        api_key = secrets.token_hex(16)
        cmd = cls.command(config, base_model, path, port, api_key)
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_SERVER_DEV_MODE": "1"}
        log.info("starting vLLM: %s", " ".join(shlex.quote(c) for c in cmd))
        logs = config.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = open(logs / "vllm.log", "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        tail: deque[str] = deque(maxlen=60)
        try:
            process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        except FileNotFoundError:
            raise EngineError(f"cannot start vLLM: {cmd[0]!r} not found. Install it on the GPU machine "
                              "(ART_EXTRAS=vllm npm run setup, or pip install 'art-server[vllm]') or use --engine hf",
                              status=503, code="engine_unavailable") from None

        def pump() -> None:
            for line in process.stdout:
                log_file.write(line)
                tail.append(line.rstrip())
                print(f"[vllm] {line}", end="", file=sys.stderr)

        asyncio.get_running_loop().run_in_executor(None, pump)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + config.vllm_startup_timeout_s
        async with httpx.AsyncClient(timeout=5) as probe:
            while True:
                if process.poll() is not None:
                    raise EngineError("vLLM exited during startup (exit %s):\n%s" % (process.returncode, "\n".join(tail)),
                                      status=503, code="engine_unavailable")
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(f"{url}/health")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    process.kill()
                    raise EngineError(f"vLLM did not become healthy in {config.vllm_startup_timeout_s:.0f} s:\n" + "\n".join(tail),
                                      status=503, code="engine_unavailable")
                await asyncio.sleep(0.5)
            models = (await probe.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {api_key}"})).json()
        context = next((m.get("max_model_len") for m in models.get("data", []) if m.get("id") == base_model), None)
        log.info("vLLM serves %s on %s (context %s)", base_model, url, context)
        return cls(base_model, process, url, api_key, int(context or 0), tail)

    # -- helpers -------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            raise EngineError("the vLLM process exited (code %s); last log lines:\n%s"
                              % (self.process.returncode, "\n".join(self.log_tail)), status=503, code="engine_unavailable")

    def _body(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]:
        out = dict(body)
        out["model"] = adapter or self.base_model
        out["return_token_ids"] = True
        out["logprobs"] = True  # training needs the sampled tokens' logprobs
        if not out.get("top_k"):
            out.pop("top_k", None)  # 0 means "off" here; vLLM spells that -1
        return out

    @staticmethod
    def _error(response: httpx.Response) -> EngineError:
        try:
            payload = response.json()
            message = payload.get("error", {}).get("message") if isinstance(payload.get("error"), dict) else payload.get("message")
        except (json.JSONDecodeError, AttributeError):
            message = None
        status = response.status_code if response.status_code in (400, 404, 413) else 502
        return EngineError(f"vLLM: {message or response.text[:500]}", status=status,
                           code="model_not_found" if status == 404 else "invalid_value" if status == 400 else "engine_error")

    # -- requests ------------------------------------------------------------------------------
    async def chat_completion(self, body: dict[str, Any], adapter: str | None, request_id: str) -> dict[str, Any]:
        await self._awake.wait()
        self._check_alive()
        try:
            # Cancelled when the client goes away: closing the connection makes vLLM abort the request.
            response = await self.client.post("/v1/chat/completions", json=self._body(body, adapter))
        except httpx.HTTPError as error:
            self._check_alive()
            raise EngineError(f"vLLM request failed: {error}", status=502, code="engine_error") from error
        if response.status_code != 200:
            raise self._error(response)
        payload = response.json()
        payload["model"] = body["model"]
        return payload

    async def chat_completion_stream(self, body: dict[str, Any], adapter: str | None,
                                     request_id: str) -> AsyncIterator[dict[str, Any]]:
        await self._awake.wait()
        self._check_alive()
        async with self.client.stream("POST", "/v1/chat/completions", json={**self._body(body, adapter), "stream": True}) as response:
            if response.status_code != 200:
                await response.aread()
                raise self._error(response)
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise EngineError(f"vLLM: {chunk['error'].get('message')}", status=502, code="engine_error")
                chunk["model"] = body["model"]
                yield chunk

    # -- adapters and sleep --------------------------------------------------------------------
    async def load_adapter(self, key: str, path: Path) -> None:
        self._check_alive()
        if key in self.adapters:  # vLLM refuses a name it already has; replace it
            await self.unload_adapter(key)
        response = await self.client.post("/v1/load_lora_adapter", json={"lora_name": key, "lora_path": str(path)})
        if response.status_code != 200:
            raise self._error(response)
        self.adapters.add(key)

    async def unload_adapter(self, key: str) -> None:
        self._check_alive()
        response = await self.client.post("/v1/unload_lora_adapter", json={"lora_name": key})
        if response.status_code != 200:
            raise self._error(response)
        self.adapters.discard(key)

    async def sleep(self) -> None:
        """Level 1: weights offloaded to CPU, KV cache discarded; requests wait for `wake`."""
        self._awake.clear()
        response = await self.client.post("/sleep", params={"level": 1})
        if response.status_code != 200:
            self._awake.set()
            raise self._error(response)
        self.sleeping = True

    async def wake(self) -> None:
        response = await self.client.post("/wake_up")
        if response.status_code != 200:
            raise self._error(response)
        self.sleeping = False
        self._awake.set()

    async def close(self) -> None:
        await self.client.aclose()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                await asyncio.to_thread(self.process.wait, 20)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def stats(self) -> dict[str, Any]:
        return {"engine": "vllm", "url": self.url, "sleeping": self.sleeping, "adapters": sorted(self.adapters),
                "pending": 0, "running": 0}
