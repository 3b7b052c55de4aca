"""The OpenAPI schema FastAPI derives, made what the server does (schemathesis checks it in
tests/test_openapi_contract.py):

- nested `$defs` (pydantic's JsonValue) become components, so every `$ref` resolves;
- no route declares 422: a request that fails validation is a 400 with an OpenAI-style error body;
- every route declares the errors it can answer (`ROUTE_ERRORS`), with that body's schema, and the
  streams it answers with (`STREAMS`);
- an integer's bounds are integers: FastAPI's schema model stores them as floats, which turns the
  int64 seed's 2**63 - 1 into 2**63, a seed the server refuses.
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA = {
    "title": "ErrorBody",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
                "param": {"type": ["string", "null"]},
            },
        }
    },
}

_WHY = {
    400: "The request is malformed or a value is out of range; the message names it",
    401: "No or a wrong bearer token",
    404: "No such model, step or file",
    405: "The route does not take this method (the Allow header lists those it does)",
    408: "The request's headers or body arrived too slowly",
    409: "The request conflicts with the server's state (a model that exists differently, a step running)",
    413: "The body is larger than the server accepts",
    415: "The body is not JSON",
    431: "The request's headers are too large or too many",
    503: "The server is stopping, or the engine is not ready",
    507: "The server's data dir is full or not writable; nothing was changed",
}

# Every authenticated route can answer these (the token gate, the HTTP connection's bounds, validation).
_COMMON = (400, 401, 405, 408, 413, 415, 431)
# The rest, route by route (path, method) -> extra statuses.
ROUTE_ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("/v1/chat/completions", "post"): (404, 409, 503),
    ("/v1/responses", "post"): (404, 409, 503),
    ("/v1/messages", "post"): (404, 409, 503),
    ("/v1/models", "get"): (),
    ("/v1/engine/stats", "get"): (),
    ("/v1/load_lora_adapter", "post"): (404, 409, 503),
    ("/v1/unload_lora_adapter", "post"): (404, 409),
    ("/v1/art/models/register", "post"): (409, 503),
    ("/v1/art/models/{name}", "get"): (404,),
    ("/v1/art/models/{name}/checkpoints", "get"): (404,),
    ("/v1/art/models/{name}/checkpoints/{step}/files/{filename}", "get"): (404,),
    ("/v1/art/models/{name}/delete_checkpoints", "post"): (404, 409),
    ("/v1/art/models/{name}/fork", "post"): (404, 409, 507),
    ("/v1/art/models/{name}/history", "get"): (404,),
    ("/v1/art/models/{name}/log", "post"): (404, 409),
    ("/v1/art/models/{name}/train", "post"): (404, 409, 503),
    ("/v1/art/models/{name}/train_sft", "post"): (404, 409, 503),
}
UNAUTHENTICATED = {("/health", "get")}

# Routes whose 200 is a stream: the sampling routes' `stream: true` (server-sent events, beside their
# JSON answer), and a training step's progress lines (NDJSON, always).
_SSE = {"description": "stream: true: server-sent events, each `data:` line one chunk of the API's own shape"}
_NDJSON = {"description": "One JSON object per line: start, progress, warning lines, then the result or an error"}
STREAMS: dict[tuple[str, str], tuple[str, dict[str, Any], bool]] = {
    ("/v1/chat/completions", "post"): ("text/event-stream", _SSE, False),
    ("/v1/responses", "post"): ("text/event-stream", _SSE, False),
    ("/v1/messages", "post"): ("text/event-stream", _SSE, False),
    ("/v1/art/models/{name}/train", "post"): ("application/x-ndjson", _NDJSON, True),
    ("/v1/art/models/{name}/train_sft", "post"): ("application/x-ndjson", _NDJSON, True),
}


def faithful(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _hoist_defs(schema, components)
    _integer_bounds(schema)
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    components["ErrorBody"] = ERROR_SCHEMA
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if (path, method) in STREAMS:
                media, described, only = STREAMS[path, method]
                content = responses.setdefault("200", {"description": "OK"}).setdefault("content", {})
                if only:
                    content.clear()
                content[media] = {"schema": described}  # each event or line is a JSON object of its own
            if (path, method) in UNAUTHENTICATED:
                statuses: tuple[int, ...] = (405,)
            else:
                statuses = _COMMON + ROUTE_ERRORS.get((path, method), (404, 409, 503))
            for status in sorted(set(statuses)):
                responses.setdefault(
                    str(status),
                    {
                        "description": _WHY[status],
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                    },
                )
    return schema


def served_limits(schema: dict[str, Any], config: Any) -> None:
    """The server's own limits where the schema can state them: `n` at most --max-n (docs/openapi.json
    holds the default's), so a request the document allows is one this server takes."""
    for model in schema.get("components", {}).get("schemas", {}).values():
        n = model.get("properties", {}).get("n") if isinstance(model, dict) else None
        if isinstance(n, dict) and "maximum" in n:
            n["maximum"] = min(n["maximum"], config.max_n)


def _hoist_defs(node: Any, components: dict[str, Any]) -> None:
    if isinstance(node, dict):
        defs = node.pop("$defs", None)
        if isinstance(defs, dict):
            for name, definition in defs.items():
                components.setdefault(name, definition)
                _hoist_defs(definition, components)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node["$ref"] = "#/components/schemas/" + ref.removeprefix("#/$defs/")
        for value in list(node.values()):
            _hoist_defs(value, components)
    elif isinstance(node, list):
        for value in node:
            _hoist_defs(value, components)


INT64 = (-(2**63), 2**63 - 1)
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _integer_bounds(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in _BOUNDS:
                if isinstance(node.get(key), float):
                    node[key] = min(max(int(node[key]), INT64[0]), INT64[1])  # a float of 2**63 was int64's bound
        for value in node.values():
            _integer_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _integer_bounds(value)
