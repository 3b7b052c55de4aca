"""A request-body size limit (413), enforced before the app parses anything."""

from __future__ import annotations

import json
from typing import Any

from .errors import error_body


class BodyLimit:
    """ASGI middleware: refuses bodies over `limit` bytes, by Content-Length or while streaming in."""

    def __init__(self, app: Any, limit: int):
        self.app = app
        self.limit = limit

    async def _refuse(self, send: Any, size: str) -> None:
        body = json.dumps(
            error_body(
                413,
                f"request body is {size}, over this server's limit of {self.limit} bytes "
                "(--max-body-bytes); send fewer trajectories per request",
                "request_too_large",
            )
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._refuse(send, f"{int(length)} bytes")
        if length is not None or scope.get("method") in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        # Chunked body: read it here, up to the limit, then hand it on.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._refuse(send, f"over {size} bytes")
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
