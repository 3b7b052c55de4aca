"""POST /v1/chat/completions answered ahead of FastAPI.

Rollouts send hundreds of these a second, and for a small model the HTTP layer costs more than
generating. FastAPI's per-request machinery (middleware stack, dependency solving, exit stacks,
body parsing in two passes) was ~60% of the server thread's time under load (py-spy, bench/serve.ts
at concurrency 64). This ASGI layer does the same checks in the same order with the same errors
(content type, pydantic validation of the body in one pass from bytes; the token was checked
before, by api/auth.py) and hands the validated request to `serving.complete_chat`, the code the
documented FastAPI route also calls. Every other request goes on to the FastAPI app.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from .errors import content_type_error, error_response, response_for, validation_message
from .schemas import ChatCompletionRequest
from .serving import complete_chat

PATH = "/v1/chat/completions"
log = logging.getLogger(__name__)


class ChatCompletionsRoute:
    def __init__(self, app: Any):
        self.app = app  # the FastAPI app (its state holds the config and the model manager)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        try:
            response = await self._respond(scope, receive)
        except asyncio.CancelledError:  # the client went away (serving cancels the handler): nobody to answer
            log.info("%s: the client disconnected; its generation was cancelled", PATH)
            return
        except Exception as error:  # ApiError, EngineError, or a bug: always an OpenAI-style body
            response = response_for(error)
        await response(scope, receive, send)

    async def _respond(self, scope: dict, receive: Any) -> Any:
        state = self.app.state
        content_type = ""
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value.decode("latin-1")
        if "json" not in content_type:
            return content_type_error(content_type)
        body = await _read_body(receive)
        if not body.strip():
            return error_response(
                400, "the request body is empty: send the chat-completions request as a JSON object", "invalid_value"
            )
        try:
            request = ChatCompletionRequest.model_validate_json(body)
        except ValidationError as error:
            message, param = validation_message(error.errors())
            return error_response(400, message, "invalid_value", param)
        return await complete_chat(request, state.manager, state.config, receive)


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left before sending its body
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)
