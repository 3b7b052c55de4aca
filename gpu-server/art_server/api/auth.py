"""Bearer-token authentication, checked ahead of everything else: a request without the right token
is answered 401 from its headers alone, before any of its body is read or parsed, on every route
but the public ones (/health, and the API docs when --docs serves them). The token comes as
`Authorization: Bearer <token>`, or as `x-api-key: <token>`, the header Anthropic's SDKs send."""

from __future__ import annotations

import json
import secrets
from typing import Any

from .errors import ApiError, error_body


def check_token(header: str, expected: str) -> None:
    """Raises the 401 ApiError unless `header` is `Bearer <expected>`."""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(
            401,
            "missing bearer token: send `Authorization: Bearer <token>` (the token the server printed "
            "in its ready line, or --token)",
            "invalid_api_key",
        )
    if not secrets.compare_digest(given.strip().encode(), expected.encode()):
        raise ApiError(401, "wrong bearer token for this server", "invalid_api_key")


class TokenGate:
    """ASGI middleware, the outermost layer: refuses a request without the token before anything reads
    its body, so a client without the token costs the server its headers and nothing more."""

    def __init__(self, app: Any, token: str, public_paths: set[str]):
        self.app = app
        self.token = token
        self.public_paths = public_paths

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in self.public_paths:
            return await self.app(scope, receive, send)
        authorization = api_key = b""
        has_body = False
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif name == b"x-api-key":
                api_key = value
            elif (name == b"content-length" and value.strip() not in (b"", b"0")) or name == b"transfer-encoding":
                has_body = True
        try:
            check_token((authorization or (b"Bearer " + api_key if api_key else b"")).decode("latin-1"), self.token)
        except ApiError as error:
            body = json.dumps(error_body(401, error.message, error.code)).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ]
            if has_body:  # the body stays unread: close the connection instead of receiving it
                headers.append((b"connection", b"close"))
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
