"""OpenAI-style error bodies: {"error": {"message", "type", "code", "param"}} with the right status."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine.base import EngineError

log = logging.getLogger(__name__)

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    503: "server_error",
    507: "server_error",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


def error_body(status: int, message: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "code": code,
            "param": param,
        }
    }


def error_response(
    status: int, message: str, code: str | None, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, param), status_code=status, headers=headers)


def validation_message(errors: Any) -> tuple[str, str | None]:
    """One message and the first offending parameter, from pydantic's (or FastAPI's) error list."""
    problems = []
    param = None
    for item in errors:
        loc = [str(p) for p in item.get("loc", []) if p != "body"]
        where = ".".join(loc) or "body"
        param = param or (loc[0] if loc else None)
        if item.get("type") == "json_invalid":
            reason = str(item.get("ctx", {}).get("error", item.get("msg")))
            if "recursion limit" in reason:
                return "the request body nests objects and arrays too deeply to be read", None
            return f"the request body is not valid JSON: {reason}", None
        problems.append(f"{where}: {item.get('msg')}")
    return "invalid request: " + "; ".join(problems[:5]), param


def content_type_error(content_type: str) -> JSONResponse:
    return error_response(
        400,
        f"the body must be JSON sent with Content-Type: application/json (got {content_type or 'none'!r})",
        "invalid_content_type",
    )


def response_for(error: Exception) -> JSONResponse:
    """The error response for an exception raised while handling a request."""
    if isinstance(error, ApiError):
        return error_response(error.status, error.message, error.code, error.param)
    if isinstance(error, EngineError):
        return error_response(error.status, str(error), error.code, error.param)
    if isinstance(error, OSError):  # the server's own files: a read-only or full data dir
        log.error("storage error: %s", error)
        return error_response(
            507,
            f"the server could not write its data ({error.strerror or error}: {error.filename or ''}); "
            "make its data dir writable and free space, then retry",
            "storage_error",
        )
    log.exception("unhandled error", exc_info=error)
    return error_response(500, f"internal server error: {type(error).__name__}: {error}", "internal_error")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        return response_for(error)

    @app.exception_handler(EngineError)
    async def engine_error(_: Request, error: EngineError) -> JSONResponse:
        return response_for(error)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        if request.method == "POST" and "json" not in content_type:
            return content_type_error(content_type)
        message, param = validation_message(error.errors())
        return error_response(400, message, "invalid_value", param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        # Starlette's own headers (a 405's `Allow`, which RFC 9110 requires) go out with the answer.
        return error_response(error.status_code, str(error.detail), code, headers=dict(error.headers or {}))

    # Its own handler: Starlette re-raises what reaches the catch-all Exception handler after answering,
    # and uvicorn then drops the connection under a client that keeps it alive.
    @app.exception_handler(OSError)
    async def storage_error(_: Request, error: OSError) -> JSONResponse:
        return response_for(error)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        return response_for(error)
