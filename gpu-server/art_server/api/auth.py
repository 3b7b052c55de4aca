"""Bearer-token authentication for every route except /health."""

from __future__ import annotations

import secrets

from fastapi import Request

from .errors import ApiError


def check_token(header: str, expected: str) -> None:
    """Raises the 401 ApiError unless `header` is `Bearer <expected>`."""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "missing bearer token: send `Authorization: Bearer <token>` (the token the server printed "
                            "in its ready line, or --token)", "invalid_api_key")
    if not secrets.compare_digest(given.strip().encode(), expected.encode()):
        raise ApiError(401, "wrong bearer token for this server", "invalid_api_key")


async def require_token(request: Request) -> None:
    # async: FastAPI would run a plain function in its thread pool, a thread hop per request.
    check_token(request.headers.get("authorization", ""), request.app.state.config.token)
