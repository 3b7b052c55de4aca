"""POST /v1/responses (OpenAI's Responses API) and POST /v1/messages (Anthropic's Messages API):
each request is validated, rewritten as the equivalent chat-completions request, sampled by the same
code as /v1/chat/completions (serving.py), and answered in the API's own shape, JSON or its own SSE
events (api/dialects/responses_api.py, api/dialects/messages_api.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from ..engine.base import EngineError
from .dialects import messages_api, responses_api
from .dialects.dialect import DialectError, sse, unsupported
from .errors import ApiError, content_type_error, response_for, validation_message
from .schemas import ChatCompletionRequest
from .serving import SSE_HEADERS, manager_of, sample_json, sample_stream

router = APIRouter()


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.post(
    "/v1/responses",
    summary="OpenAI's Responses API (function tools, no stored responses), with prompt and sampled token ids",
    openapi_extra=_body_doc(responses_api.ResponsesRequest),
)
async def responses(request: Request) -> Response:
    body = _validated(responses_api.ResponsesRequest, await _json_body(request))
    chat = _chat_request(_rewritten(responses_api.chat_request, body))
    if body.stream:
        events = responses_api.ResponseEvents(body)
        return await _stream(request, chat, events.take, events.error)
    completion = await sample_json(chat, manager_of(request), request.app.state.config, request.receive)
    return Response(orjson.dumps(responses_api.response_json(body, completion)), media_type="application/json")


@router.post(
    "/v1/messages",
    summary="Anthropic's Messages API (client tools, no thinking), with prompt and sampled token ids",
    openapi_extra=_body_doc(messages_api.MessagesRequest),
)
async def messages(request: Request) -> Response:
    try:
        body = _validated(messages_api.MessagesRequest, await _json_body(request))
        chat = _chat_request(_rewritten(messages_api.chat_request, body))
        if body.stream:
            return await _stream(request, chat, messages_api.MessageEvents(body).take, messages_api.MessageEvents.error)
        completion = await sample_json(chat, manager_of(request), request.app.state.config, request.receive)
    except (ApiError, EngineError) as error:
        # Anthropic's error shape: `type: error` around the same `error` object (its SDKs read both).
        response = response_for(error)
        return JSONResponse({"type": "error", **orjson.loads(response.body)}, status_code=response.status_code)
    return Response(orjson.dumps(messages_api.message_json(body, completion)), media_type="application/json")


async def _json_body(request: Request) -> bytes:
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type:
        raise ApiError(400, orjson.loads(content_type_error(content_type).body)["error"]["message"], "invalid_content_type")
    return await request.body()


def _validated(model: type[BaseModel], body: bytes) -> Any:
    """The request parsed from JSON bytes, or the 400 that says what is wrong (an unknown field by name)."""
    if not body.strip():
        raise ApiError(400, "the request body is empty: send the request as a JSON object", "invalid_value")
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        extra = next((e for e in error.errors() if e.get("type") == "extra_forbidden"), None)
        if extra is not None:
            where = ".".join(str(p) for p in extra["loc"])
            refusal = unsupported(where, f"the field {where!r}", "leave it out")
            raise ApiError(400, str(refusal), refusal.code, refusal.param) from None
        message, param = validation_message(error.errors())
        raise ApiError(400, message, "invalid_value", param) from None


def _rewritten(rewrite: Callable[[Any], dict[str, Any]], body: Any) -> dict[str, Any]:
    try:
        return rewrite(body)
    except DialectError as error:
        raise ApiError(400, str(error), error.code, error.param) from None


def _chat_request(body: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as error:
        message, param = validation_message(error.errors())
        raise ApiError(400, message, "invalid_value", param) from None


async def _stream(
    request: Request,
    chat: ChatCompletionRequest,
    take: Callable[[dict[str, Any]], list[dict[str, Any]]],
    error: Callable[[int, str, str | None], dict[str, Any]],
) -> StreamingResponse:
    chunks = await sample_stream(chat, manager_of(request), request.app.state.config)
    return StreamingResponse(_events(chunks, take, error), media_type="text/event-stream", headers=SSE_HEADERS)


async def _events(
    chunks: AsyncGenerator[dict[str, Any], None],
    take: Callable[[dict[str, Any]], list[dict[str, Any]]],
    error: Callable[[int, str, str | None], dict[str, Any]],
) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            for event in take(chunk):
                yield sse(event)
    except EngineError as failure:
        yield sse(error(failure.status, str(failure), failure.code))
    finally:
        await chunks.aclose()  # ends the sampling at once when the client went away
