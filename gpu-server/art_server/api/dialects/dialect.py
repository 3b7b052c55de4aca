"""What the Responses API and Anthropic's Messages API share on this server: both are answered by
rewriting the request as the equivalent chat-completions request (so it renders to exactly the
prompt ids of that request, on either engine) and the sampled chat completion back into the API's
own shape. The per-sample fields training needs ride along at the top of each answer, named as on a
chat choice: `prompt_token_ids`, `token_ids`, `logprobs` (`{"content": [...]}`), `art_provenance`,
`art_policy_step`, `art_sampling`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.json_schema import JsonDict

# Item and call ids: unique per process; a counter (os.urandom per id showed up in profiles before).
_PREFIX = f"{os.getpid():x}{os.urandom(3).hex()}"
_counter = iter(range(1 << 62))


def new_id(kind: str) -> str:
    return f"{kind}_{_PREFIX}{next(_counter):08x}"


class Forbidding(BaseModel):
    """A request model that refuses unknown fields: what this server does not serve is a 400 naming
    the field, never silently ignored."""

    # strict: a number sent as a string, or a bool as a number, is a 400 as its schema says, not coerced.
    model_config = ConfigDict(extra="forbid", strict=True)


def not_served(default: Any = None, **accepted: JsonValue) -> Any:
    """A field this server refuses when set (a 400 naming it): the published schema says null, or
    `accepted` (a JSON Schema) for the values that mean "off"."""
    only_null: JsonDict = {"type": "null"}
    return Field(default, json_schema_extra={"anyOf": [accepted, only_null]} if accepted else only_null)


class DialectError(ValueError):
    """A request this API's rewriting refuses: the routes answer it as a 400 naming `param`."""

    def __init__(self, message: str, param: str, code: str):
        super().__init__(message)
        self.param = param
        self.code = code


def invalid(where: str, message: str) -> DialectError:
    return DialectError(f"{where}: {message}", where, "invalid_value")


def unsupported(where: str, what: str, advice: str = "") -> DialectError:
    return DialectError(
        f"{where}: {what} is not supported by this server{'; ' + advice if advice else ''}", where, "unsupported_value"
    )


def text_of(parts: Any, where: str, kinds: tuple[str, ...]) -> str:
    """A content given as a string or as a list of text parts (of the `kinds` the API names them)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise invalid(where, "must be a string or a list of content parts")
    texts = []
    for k, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            if kind in ("image", "input_image", "document", "input_file", "input_audio", "file"):
                raise unsupported(
                    f"{where}[{k}]", f"a content part of type {kind!r}", "this server serves text models: send text parts"
                )
            raise invalid(f"{where}[{k}]", f"a content part must be an object of type {' or '.join(map(repr, kinds))}")
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"{where}[{k}].text", "must be a string")
        texts.append(text)
    return "".join(texts)


def arguments_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _int64_or_float(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(value)


def json_safe(value: Any) -> Any:
    """`value` with integers past 64 bits as floats: the answer's JSON encoder writes no larger ones."""
    return json.loads(json.dumps(value), parse_int=_int64_or_float)


def arguments_object(arguments: str) -> Any:
    """A tool call's arguments as a JSON object (what the Messages API carries); the text under
    `_raw` when it is not one."""
    try:
        value = json.loads(arguments, parse_int=_int64_or_float)
    except (json.JSONDecodeError, RecursionError):
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def sample_fields(completion: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """What training needs of one sample, from a tagged chat completion and its choice."""
    fields: dict[str, Any] = {
        "prompt_token_ids": completion.get("prompt_token_ids") or [],
        "token_ids": choice.get("token_ids") or [],
        "logprobs": {"content": (choice.get("logprobs") or {}).get("content") or []},
    }
    for key in ("art_provenance", "art_policy_step", "art_sampling"):
        if key in choice:
            fields[key] = choice[key]
    return fields


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event named by its `type`, as both APIs' SDKs read them."""
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


class StreamedSample:
    """The running state of one streamed chat choice: its ids, logprobs, visible text and end."""

    def __init__(self) -> None:
        self.prompt_ids: list[int] = []
        self.token_ids: list[int] = []
        self.entries: list[dict[str, Any]] = []
        self.pending = ""  # text not yet shown: whitespace only, until something visible follows
        self.shown = ""
        self.finish: dict[str, Any] | None = None  # the finishing chunk's choice

    def take(self, chunk: dict[str, Any]) -> str:
        """Feeds a chunk; returns the text to show now (whitespace is held until text follows, so an
        answer that is only tool calls opens no text item)."""
        if chunk.get("prompt_token_ids"):
            self.prompt_ids = chunk["prompt_token_ids"]
        out = ""
        for choice in chunk.get("choices", []):
            self.token_ids.extend(choice.get("token_ids") or [])
            self.entries.extend((choice.get("logprobs") or {}).get("content") or [])
            delta = choice.get("delta") or {}
            self.pending += delta.get("content") or ""
            finishing = choice.get("finish_reason") is not None
            if self.pending.strip() or (finishing and not delta.get("tool_calls")):
                out, self.pending = out + self.pending, ""
            if finishing:
                self.finish = choice
        self.shown += out
        return out

    def completion(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The chat completion and choice the stream described (for the final answer object)."""
        assert self.finish is not None
        calls = (self.finish.get("delta") or {}).get("tool_calls") or []
        text = self.shown.strip() if calls else self.shown  # as a JSON answer has it
        choice = {
            key: self.finish[key]
            for key in ("finish_reason", "stop_reason", "art_provenance", "art_policy_step", "art_sampling")
            if key in self.finish
        }
        choice.update(
            message={
                "role": "assistant",
                "content": (text or None) if calls else text,
                **({"tool_calls": [{k: v for k, v in c.items() if k != "index"} for c in calls]} if calls else {}),
            },
            token_ids=self.token_ids,
            logprobs={"content": self.entries},
        )
        return {"prompt_token_ids": self.prompt_ids}, choice
