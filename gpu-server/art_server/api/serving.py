"""Serving routes: health, the model list, chat completions, and runtime adapter loading
(the same `/v1/load_lora_adapter` shape as vLLM)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from .. import __version__
from ..core.distribution import SamplingParams
from ..core.names import NameError_, check_name, split_adapter_name
from ..core.provenance import Stamp
from ..engine.base import EngineError
from ..models.resolve import existing_folder
from ..service.manager import ModelManager, ModelNotFound
from .errors import ApiError, error_body
from .schemas import ChatCompletionRequest, Health, LoadAdapterRequest, ModelList, UnloadAdapterRequest

public = APIRouter()
# Request ids: unique per process start; a counter, because os.urandom per request showed up in profiles.
_ID_PREFIX = f"chatcmpl-{os.getpid():x}{os.urandom(4).hex()}"
_request_ids = (f"{_ID_PREFIX}{i:08x}" for i in itertools.count())
router = APIRouter()  # token checked ahead of the app (api/auth.py)


def manager_of(request: Request) -> ModelManager:
    return request.app.state.manager


@public.get("/health", response_model=Health, summary="Liveness; needs no token")
async def health(request: Request) -> Health:
    manager = manager_of(request)
    return Health(version=__version__, engine=manager.engine.kind if manager.engine else None, base_model=manager.base_model)


@router.get("/v1/models", response_model=ModelList, summary="The base model and every served adapter step")
async def list_models(request: Request) -> ModelList:
    return ModelList.model_validate({"data": manager_of(request).listing()})


@router.get("/v1/engine/stats", summary="Engine load: pending and running sequences, tokens generated")
async def engine_stats(request: Request) -> dict[str, Any]:
    manager = manager_of(request)
    return {
        **(manager.engine.stats() if manager.engine else {"engine": None}),
        "training_slots": manager.training.slots(),
        "trainer_ranks": manager.training.ranks(),
    }


async def _resolve(manager: ModelManager, model: str) -> str | None:
    try:
        return await manager.resolve_wait(model)
    except ModelNotFound as error:
        raise ApiError(404, str(error), "model_not_found", "model") from None


async def _cancel_on_disconnect(receive: Any, task: asyncio.Task) -> None:
    # The body is already read, so the next ASGI message is http.disconnect: wait for it, no polling.
    while (await receive())["type"] != "http.disconnect":
        pass
    task.cancel()  # the engine frees the request's slots


@router.post("/v1/chat/completions", summary="OpenAI chat completions, with prompt_token_ids and per-choice token_ids")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    # The server answers this route in ChatCompletionsRoute (chat_route.py), ahead of FastAPI; this
    # declaration documents it in /docs and serves the FastAPI app on its own.
    return await complete_chat(body, manager_of(request), request.app.state.config, request.receive)


async def complete_chat(body: ChatCompletionRequest, manager: ModelManager, config: Any, receive: Any) -> Response:
    """A validated chat-completions request to its response: JSON, or an SSE stream."""
    if body.stream:
        chunks = await sample_stream(body, manager, config)
        return StreamingResponse(_sse(chunks), media_type="text/event-stream", headers=SSE_HEADERS)
    return Response(orjson.dumps(await sample_json(body, manager, config, receive)), media_type="application/json")


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _sampling(body: ChatCompletionRequest, manager: ModelManager, config: Any) -> tuple[str | None, Stamp, dict[str, Any]]:
    if body.n > config.max_n:
        raise ApiError(400, f"n={body.n} is over this server's limit of {config.max_n} (--max-n)", "invalid_value", "n")
    adapter = await _resolve(manager, body.model)
    engine = manager.require_engine()
    # The step that samples this request (bare names resolve to a step above) and the parameters it
    # samples with: each choice says both, and the trainer scores it with them.
    policy_step = split_adapter_name(adapter)[1] if adapter is not None else None
    payload = body.model_dump(exclude_none=True, mode="json")
    return adapter, (policy_step, SamplingParams.of_request(payload).wire(engine.kind)), payload


async def sample_json(body: ChatCompletionRequest, manager: ModelManager, config: Any, receive: Any) -> dict[str, Any]:
    """The tagged `chat.completion` of a request (the other APIs' routes translate it)."""
    adapter, stamp, payload = await _sampling(body, manager, config)
    manager.acquire(adapter)  # the adapter stays loaded until this request ends
    this = asyncio.current_task()
    assert this is not None  # a request handler runs as a task
    watcher = asyncio.create_task(_cancel_on_disconnect(receive, this))
    try:
        result = await manager.require_engine().chat_completion(payload, adapter, next(_request_ids))
    finally:
        watcher.cancel()
        manager.release(adapter)
    manager.provenance.tag_completion(result, stamp)
    return result


async def sample_stream(body: ChatCompletionRequest, manager: ModelManager, config: Any) -> AsyncGenerator[dict[str, Any], None]:
    """The tagged `chat.completion.chunk`s of a streamed request. Errors before the first token raise
    here (so they still get a status code); later ones (EngineError) raise from the iterator."""
    adapter, stamp, payload = await _sampling(body, manager, config)
    manager.acquire(adapter)
    try:
        stream = manager.require_engine().chat_completion_stream(payload, adapter, next(_request_ids))
        first = await stream.__anext__()
    except BaseException:
        manager.release(adapter)
        raise
    return _tagged(first, stream, lambda: manager.release(adapter), manager.provenance.stream_tagger(stamp))


async def _tagged(
    first: dict[str, Any],
    rest: AsyncGenerator[dict[str, Any], None],
    done: Callable[[], None],
    tagger: Callable[[dict[str, Any]], dict[str, Any]],
) -> AsyncGenerator[dict[str, Any], None]:
    try:
        yield tagger(first)
        async for chunk in rest:
            yield tagger(chunk)
    finally:
        with contextlib.suppress(Exception):
            await rest.aclose()  # a client that went away cancels its sequences here
        done()


async def _sse(chunks: AsyncGenerator[dict[str, Any], None]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    except EngineError as error:
        yield b"data: " + orjson.dumps(error_body(error.status, str(error), error.code)) + b"\n\n"
    finally:
        await chunks.aclose()  # ends the sampling at once when the client went away
    yield b"data: [DONE]\n\n"


def _adapter_name(lora_name: str) -> tuple[str, int]:
    try:
        name, step = split_adapter_name(lora_name)
        check_name("model", name)
    except NameError_ as error:
        raise ApiError(400, str(error), "invalid_value", "lora_name") from None
    if step is None:
        raise ApiError(400, f"lora_name {lora_name!r} needs a step: name@step", "invalid_value", "lora_name")
    return name, step


@router.post("/v1/load_lora_adapter", summary="Serve a PEFT adapter folder as name@step (vLLM's runtime LoRA API)")
async def load_lora_adapter(body: LoadAdapterRequest, request: Request) -> dict[str, str]:
    name, step = _adapter_name(body.lora_name)
    path = existing_folder(body.lora_path)
    if path is None:
        raise ApiError(400, f"lora_path {body.lora_path[:200]!r} is not a folder on the server", "invalid_value", "lora_path")
    manager = manager_of(request)
    if name in manager.training.models:
        raise ApiError(
            409,
            f"{name!r} is a model trained on this server: its steps are served from its own checkpoints "
            f"({name}@N loads step N on demand); load this adapter under another name",
            "conflict",
            "lora_name",
        )
    try:
        await manager.add_adapter(name, step, path.resolve())
    except ModelNotFound as error:
        raise ApiError(404, str(error), "model_not_found") from None
    return {"status": "ok", "model": body.lora_name}


@router.post("/v1/unload_lora_adapter", summary="Stop serving name@step")
async def unload_lora_adapter(body: UnloadAdapterRequest, request: Request) -> dict[str, str]:
    name, step = _adapter_name(body.lora_name)
    try:
        await manager_of(request).remove_adapter(name, step)
    except ModelNotFound as error:
        raise ApiError(404, str(error), "model_not_found", "lora_name") from None
    return {"status": "ok", "model": body.lora_name}
