"""The transformers engine: a base model plus PEFT LoRA adapters in this process, on CPU or CUDA,
with continuous batching across concurrent requests (see scheduler.py)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import torch

from ...chat.structured import TokenConstraints, requested_schema
from ...chat.turn_end import end_of_turn_ids
from ...core.distribution import SamplingParams
from ..base import Engine, EngineError
from ..chat_frontend import ChatFrontend, ChatStream
from ..device_choice import choose_dtype, resolve_device
from ..openai_format import ChoiceState
from .runner import HFModelRunner
from .sampling import RowParams
from .scheduler import BatchScheduler, ErrorEvent, FinishEvent, Sequence, SequenceEvent, TokenEvent

log = logging.getLogger(__name__)


def decode_threads(device: torch.device) -> int | None:
    """Intra-op threads for CPU decode steps: leave a core to the HTTP thread and the clients. Small
    decode steps gain little from a second thread and lose more to contention (bench/serve.ts:
    c=64 rose from ~4.6k to ~5.3k tokens/s on 2 cores). ART_ENGINE_THREADS overrides."""
    if os.environ.get("ART_ENGINE_THREADS"):
        return int(os.environ["ART_ENGINE_THREADS"])
    if device.type != "cpu":
        return None
    return max(1, (os.cpu_count() or 2) - 1)


def _seed_generator(seed: int, index: int, device: torch.device) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little"))


class HFEngine(Engine):
    kind = "hf"

    def __init__(
        self, base_model: str, model: Any, tokenizer: Any, device: torch.device, max_batch_size: int = 256, seed: int = 0
    ):
        self.base_model = base_model
        self.tokenizer = tokenizer
        self.device = device
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or tokenizer.model_max_length)
        self.runner = HFModelRunner(model, tokenizer, device)
        eos = end_of_turn_ids(tokenizer, model.generation_config.eos_token_id)
        self.eos_token_ids = eos
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
        self.scheduler = BatchScheduler(
            self.runner, eos, max_batch_size=max_batch_size, pad_token_id=pad, seed=seed, threads=decode_threads(device)
        )
        self.frontend = ChatFrontend(tokenizer, self.context_length)
        self.constraints = TokenConstraints(tokenizer, sorted(eos))
        self.requests_served = 0

    # -- adapters ------------------------------------------------------------------------------
    def shared_model(self) -> tuple[HFModelRunner, threading.RLock]:
        """The trainer trains on this process's model, under the lock every decode step takes."""
        return self.runner, self.scheduler.model_lock

    async def load_adapter(self, key: str, path: Path) -> None:
        def load() -> None:
            with self.scheduler.model_lock:
                self.runner.load_adapter(key, path)

        try:
            await asyncio.to_thread(load)
        except (ValueError, RuntimeError, KeyError) as error:  # PEFT: the adapter does not fit this base model
            raise EngineError(
                f"the adapter at {path} cannot be served on this base model: {type(error).__name__}: {str(error)[:500]}",
                code="invalid_adapter",
                param="lora_path",
            ) from None

    async def unload_adapter(self, key: str) -> None:
        def unload() -> None:
            with self.scheduler.model_lock:
                self.runner.unload_adapter(key)

        await asyncio.to_thread(unload)

    async def sleep(self) -> None:
        self.scheduler.pause()

    async def wake(self) -> None:
        self.scheduler.resume()

    async def close(self) -> None:
        await asyncio.to_thread(self.scheduler.shutdown)

    def stats(self) -> dict[str, Any]:
        return {
            "engine": "hf",
            "device": str(self.device),
            **self.scheduler.load(),
            "steps": self.scheduler.steps,
            "prompt_cache": {"prompts": len(self.frontend.prompt_cache), "bytes": self.frontend.prompt_cache.bytes},
            "tokens_generated": self.scheduler.tokens_generated,
            "prompts_prefilled": self.scheduler.prompts_prefilled,
            "adapters": sorted(self.runner.adapter_slots),
        }

    # -- requests ------------------------------------------------------------------------------
    async def _prompt_for(self, body: dict[str, Any], adapter: str | None) -> list[int]:
        if adapter is not None and adapter not in self.runner.adapter_slots:
            raise EngineError(f"adapter {adapter!r} is not loaded", status=404, code="model_not_found", param="model")
        return await self.frontend.prompt_ids(body["messages"], body.get("tools"))

    async def _constraint(self, body: dict[str, Any], prompt: list[int]) -> Callable[[list[int]], list[int]] | None:
        """response_format's token constraint, shared by the request's choices (None: free text)."""
        schema = requested_schema(body)
        if schema is None:
            return None
        return await asyncio.to_thread(self.constraints.constraint, schema, prompt)  # the first builds a table

    def _prepare(
        self,
        body: dict[str, Any],
        adapter: str | None,
        request_id: str,
        emit: Any,
        stream: bool,
        prompt: list[int],
        constraint: Callable[[list[int]], list[int]] | None = None,
    ) -> list[Sequence]:
        if adapter is not None and adapter not in self.runner.adapter_slots:  # unloaded while the prompt was tokenized
            raise EngineError(f"adapter {adapter!r} is not loaded", status=404, code="model_not_found", param="model")
        max_tokens = self.frontend.max_tokens(prompt, body)
        stop = self.frontend.stop_strings(body)
        seqs = []
        sampling = SamplingParams.of_request(body)  # what each choice's art_sampling records, too
        for index in range(body.get("n") or 1):
            seed = body.get("seed")
            params = RowParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                min_p=sampling.min_p,
                top_logprobs=int(body.get("top_logprobs") or 0),
                generator=_seed_generator(seed, index, self.device) if seed is not None else None,
            )
            seqs.append(
                Sequence(request_id, index, adapter, prompt, max_tokens, params, emit, stop, stream=stream, constraint=constraint)
            )
        return seqs

    async def _stream_events(self, body: dict[str, Any], adapter: str | None, request_id: str):
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[SequenceEvent] = asyncio.Queue()

        def emit(event: SequenceEvent) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        prompt = await self._prompt_for(body, adapter)
        constraint = await self._constraint(body, prompt)
        seqs = self._prepare(body, adapter, request_id, emit, stream=True, prompt=prompt, constraint=constraint)
        self.scheduler.submit(seqs)
        return prompt, seqs, queue

    def _model_name(self, body: dict[str, Any]) -> str:
        return body["model"]

    async def sample(self, prompt: list[int], body: dict[str, Any], adapter: str | None, request_id: str) -> list[ChoiceState]:
        """Samples the request's choices from prompt ids (sampling parameters from `body`)."""
        loop = asyncio.get_running_loop()
        finished = loop.create_future()  # one wake-up per request, not a task per event

        def on_event(event: SequenceEvent) -> None:  # on the event loop
            nonlocal pending
            state = states[event.index]
            if isinstance(event, FinishEvent):  # the scheduler is done with the sequence: read it
                seq = seqs[event.index]
                state.token_ids, state.logprobs, state.top_logprobs = seq.generated, seq.logprobs, seq.top_logprobs
                state.finish_reason = event.reason
            elif isinstance(event, ErrorEvent):
                state.error = event.message
            else:
                return
            pending -= 1
            if not pending and not finished.done():
                finished.set_result(None)

        def emit(event: SequenceEvent) -> None:  # on the scheduler thread
            loop.call_soon_threadsafe(on_event, event)

        constraint = await self._constraint(body, prompt)
        seqs = self._prepare(body, adapter, request_id, emit, stream=False, prompt=prompt, constraint=constraint)
        states = [ChoiceState(i) for i in range(len(seqs))]
        pending = len(seqs)
        self.scheduler.submit(seqs)
        try:
            await finished
        except BaseException:  # cancelled (the client went away): free the slots
            self.scheduler.cancel(request_id)
            raise
        errors = [s.error for s in states if s.error]
        if errors:
            raise EngineError(f"generation failed: {errors[0]}", status=500, code="engine_error")
        return states

    async def chat_completion(self, body: dict[str, Any], adapter: str | None, request_id: str) -> dict[str, Any]:
        prompt = await self._prompt_for(body, adapter)
        states = await self.sample(prompt, body, adapter, request_id)
        self.requests_served += 1
        return self.frontend.completion(request_id, self._model_name(body), prompt, states, body)

    async def chat_completion_stream(
        self, body: dict[str, Any], adapter: str | None, request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        prompt, seqs, queue = await self._stream_events(body, adapter, request_id)
        chunks = ChatStream(self.frontend, request_id, self._model_name(body), int(time.time()), body, len(seqs))
        pending = len(seqs)
        try:
            yield chunks.first(prompt)
            while pending:
                event = await queue.get()
                if isinstance(event, TokenEvent):
                    yield chunks.token(event.index, event.token_id, event.logprob, event.top_logprobs)
                elif isinstance(event, ErrorEvent):
                    raise EngineError(f"generation failed: {event.message}", status=500, code="engine_error")
                elif isinstance(event, FinishEvent):
                    pending -= 1
                    yield chunks.finish(event.index, event.reason)
            self.requests_served += 1
            usage = chunks.usage(prompt)
            if usage:
                yield usage
        finally:
            if pending:
                self.scheduler.cancel(request_id)


def load_hf_engine(
    base_model: str, model_path: str | Path, device: str = "auto", dtype: str = "auto", max_batch_size: int = 256
) -> HFEngine:
    """Loads a base model from a local folder or the local Hugging Face cache (never downloads)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_device = resolve_device(device)
    torch_dtype = choose_dtype(dtype, torch_device, model_path)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch_dtype, local_files_only=True).to(torch_device)  # pyright: ignore[reportArgumentType]  (transformers' stubs type .to() oddly)
    model.eval()
    # PEFT writes this into every adapter_config.json as base_model_name_or_path: the id a user
    # loads the base by elsewhere (e.g. the Hub id), not this machine's cache folder.
    model.name_or_path = model.config._name_or_path = base_model
    log.info("loaded %s on %s (%s) in %.2f s", base_model, torch_device, torch_dtype, time.perf_counter() - started)
    return HFEngine(base_model, model, tokenizer, torch_device, max_batch_size=max_batch_size)
