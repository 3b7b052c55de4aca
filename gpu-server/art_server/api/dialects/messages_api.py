"""Anthropic's Messages API (`POST /v1/messages`) as chat completions (see api/dialects/dialect.py).

Served: `system` (a string or text blocks), `messages` with text, `tool_use` and `tool_result`
blocks, tools with an `input_schema`, `tool_choice` auto/none, `max_tokens`, `temperature`,
`top_p`, `top_k`, `stop_sequences`, streaming (the API's own event sequence). Accepted without
effect on sampling: `metadata`, `service_tier`, `cache_control` on blocks and tools, a tool's
`eager_input_streaming`, `thinking` of type disabled. Anything else (thinking, images and documents, server tools, a final assistant
message to continue) is a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue

from ...core.json_types import INTEGRAL, WholeNumber
from ..schemas import MAX_TOKEN_ID, MAX_TOKENS_PER_SEQUENCE, JsonObject
from .dialect import (
    Forbidding,
    StreamedSample,
    arguments_object,
    arguments_text,
    invalid,
    new_id,
    not_served,
    sample_fields,
    text_of,
    unsupported,
)

TEXT_BLOCKS = ("text",)
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


# What _messages() below checks of each message, for the published schema (the rules that relate
# messages to each other, such as a tool_result's tool_use before it, stay in the code).
MESSAGE_SCHEMA = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}},
                },
            ]
        },
    },
    "additionalProperties": False,
}


class MessagesRequest(Forbidding):
    model: str = Field(min_length=1)
    max_tokens: WholeNumber = Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE)
    messages: list[JsonObject] = Field(min_length=1, json_schema_extra={"items": MESSAGE_SCHEMA})
    system: str | list[JsonObject] | None = None
    tools: list[JsonObject] | None = None
    tool_choice: JsonObject | None = Field(
        None,
        json_schema_extra={
            "anyOf": [
                {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["auto", "none"]}}},
                {"type": "null"},
            ]
        },
    )
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: Annotated[int, Field(ge=1, le=MAX_TOKEN_ID), INTEGRAL] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    # No effect on what is sampled:
    metadata: JsonObject | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    # Not served: a 400 that names them (below) when set.
    thinking: JsonObject | None = not_served(type="object", properties={"type": {"const": "disabled"}})
    container: JsonValue = not_served()
    mcp_servers: JsonValue = not_served()
    context_management: JsonValue = not_served()


def chat_request(request: MessagesRequest) -> dict[str, Any]:
    """The equivalent chat-completions request (the body a ChatCompletionRequest validates)."""
    if request.thinking and request.thinking.get("type") != "disabled":
        raise unsupported("thinking", "extended thinking", "this server's models have no thinking budget")
    for field in ("container", "mcp_servers", "context_management"):
        if getattr(request, field) is not None:
            raise unsupported(field, field)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": _messages(request),
        "stream": request.stream,
        "logprobs": True,
        "max_tokens": request.max_tokens,
    }
    if request.tools:
        body["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        kind = request.tool_choice.get("type")
        if kind not in ("auto", "none"):
            raise unsupported("tool_choice.type", f"tool_choice {str(kind)[:40]!r}", "it supports 'auto' and 'none'")
        body["tool_choice"] = kind
    for name in ("temperature", "top_p", "top_k"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    return body


def _messages(request: MessagesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": text_of(request.system, "system", TEXT_BLOCKS)})
    calls: set[str] = set()
    for i, message in enumerate(request.messages):
        where = f"messages[{i}]"
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            raise invalid(f"{where}.role", "must be 'user' or 'assistant'")
        if set(message) - {"role", "content"}:
            raise invalid(where, f"unknown field(s) {sorted(set(message) - {'role', 'content'})}")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if not isinstance(content, list) or not content:
            raise invalid(f"{where}.content", "must be a string or a non-empty list of content blocks")
        if role == "assistant":
            messages.append(_assistant(content, where, calls))
        else:
            messages += _user(content, where, calls)
    if request.messages[-1].get("role") == "assistant":
        raise unsupported(
            f"messages[{len(request.messages) - 1}]",
            "a final assistant message (a prefill to continue)",
            "end the conversation with a user message",
        )
    return messages


def _typed_blocks(blocks: list[Any], where: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, type, block) of each content block; a 400 for one that is not an object with a type."""
    for k, block in enumerate(blocks):
        spot = f"{where}.content[{k}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise invalid(f"{spot}.type", "each content block must be an object with a type")
        yield spot, kind, block


def _assistant(blocks: list[Any], where: str, calls: set[str]) -> dict[str, Any]:
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for spot, kind, block in _typed_blocks(blocks, where):
        if kind == "text":
            texts.append(text_of([block], spot, TEXT_BLOCKS))
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise invalid(spot, "a tool_use block needs an id and a name (strings)")
            if not isinstance(arguments, dict):
                raise invalid(f"{spot}.input", "must be an object")
            tool_calls.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments_text(arguments)}}
            )
            calls.add(call_id)
        elif kind in ("thinking", "redacted_thinking"):
            raise unsupported(f"{spot}.type", f"a {kind} block")
        elif kind.startswith("server_tool") or kind.endswith("_tool_result"):
            raise unsupported(f"{spot}.type", f"a server tool's block ({kind!r})", "only client tools are served")
        else:
            raise invalid(f"{spot}.type", f"{kind[:80]!r} is not an assistant content block this server knows (text, tool_use)")
    text = "".join(texts)
    return {
        "role": "assistant",
        "content": text if text or not tool_calls else None,
        **({"tool_calls": tool_calls} if tool_calls else {}),
    }


def _user(blocks: list[Any], where: str, calls: set[str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    for spot, kind, block in _typed_blocks(blocks, where):
        if kind == "text":
            texts.append(text_of([block], spot, TEXT_BLOCKS))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in calls:
                raise invalid(f"{spot}.tool_use_id", f"{str(call_id)[:80]!r} answers no tool_use earlier in messages")
            output = block.get("content", "")
            results.append({"role": "tool", "tool_call_id": call_id, "content": text_of(output, f"{spot}.content", TEXT_BLOCKS)})
        elif kind in ("image", "document", "search_result", "container_upload"):
            raise unsupported(
                f"{spot}.type", f"a content block of type {kind!r}", "this server serves text models: send text blocks"
            )
        else:
            raise invalid(f"{spot}.type", f"{kind[:80]!r} is not a user content block this server knows (text, tool_result)")
    # Tool results answer the previous turn, so they come first; any text is the next user turn.
    return results + ([{"role": "user", "content": "".join(texts)}] if texts or not results else [])


def _tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    kind = tool.get("type", "custom")
    if kind != "custom":
        raise unsupported(
            f"{where}.type", f"the server tool {str(kind)[:60]!r}", "only client tools (name, input_schema) are served"
        )
    # eager_input_streaming changes only how a tool's input is streamed (here: whole, in one delta).
    unknown = set(tool) - {"type", "name", "description", "input_schema", "cache_control", "eager_input_streaming", "strict"}
    if tool.get("strict"):
        raise unsupported(
            f"{where}.strict",
            "strict tool use (arguments constrained to the schema)",
            "arguments are sampled freely: validate them in the tool",
        )
    if unknown:
        raise invalid(where, f"unknown field(s) {sorted(unknown)} in a tool")
    if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
        raise invalid(where, "a tool needs a name (string) and an input_schema (object)")
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


# -- answers -------------------------------------------------------------------------------------


def _stop(choice: dict[str, Any]) -> tuple[str, str | None]:
    if choice.get("stop_reason") is not None:
        return "stop_sequence", choice["stop_reason"]
    return STOP_REASONS.get(choice.get("finish_reason") or "", "end_turn"), None


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):
        blocks.append({"type": "text", "text": message.get("content") or ""})
    for call in message.get("tool_calls") or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": arguments_object(call["function"]["arguments"]),
            }
        )
    return blocks


def message_object(
    request: MessagesRequest, message_id: str, completion: dict[str, Any], choice: dict[str, Any]
) -> dict[str, Any]:
    stop_reason, stop_sequence = _stop(choice)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": _content(choice["message"]),
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(completion, choice),
        **sample_fields(completion, choice),
    }


def _usage(completion: dict[str, Any], choice: dict[str, Any]) -> dict[str, int]:
    return {
        "input_tokens": len(completion.get("prompt_token_ids") or []),
        "output_tokens": len(choice.get("token_ids") or []),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message_json(request: MessagesRequest, completion: dict[str, Any]) -> dict[str, Any]:
    """The Message object of a (tagged) chat completion."""
    return message_object(request, new_id("msg"), completion, completion["choices"][0])


class MessageEvents:
    """Chat chunks in, the Messages API's stream events out (`message_start` ... `message_stop`)."""

    def __init__(self, request: MessagesRequest):
        self.request = request
        self.id = new_id("msg")
        self.sample = StreamedSample()
        self.started = False
        self.blocks = 0
        self.text_open = False

    def take(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        text = self.sample.take(chunk)
        if not self.started:
            self.started = True
            events.append(
                {
                    "type": "message_start",
                    "message": {
                        "id": self.id,
                        "type": "message",
                        "role": "assistant",
                        "model": self.request.model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "prompt_token_ids": self.sample.prompt_ids,
                        "usage": {
                            "input_tokens": len(self.sample.prompt_ids),
                            "output_tokens": 0,
                            "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0,
                        },
                    },
                }
            )
        if text:
            if not self.text_open:
                self.text_open = True
                events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
                self.blocks = 1
            events.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
        if self.sample.finish is not None:
            events += self._finish()
        return events

    def _finish(self) -> list[dict[str, Any]]:
        completion, choice = self.sample.completion()
        events: list[dict[str, Any]] = []
        calls = choice["message"].get("tool_calls") or []
        if not self.text_open and not calls:  # an empty answer is still one (empty) text block
            events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            self.text_open, self.blocks = True, 1
        if self.text_open:
            events.append({"type": "content_block_stop", "index": 0})
        for block in (b for b in _content(choice["message"]) if b["type"] == "tool_use"):
            index = self.blocks
            self.blocks += 1
            events += [
                {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": arguments_text(block["input"])},
                },
                {"type": "content_block_stop", "index": index},
            ]
        stop_reason, stop_sequence = _stop(choice)
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": {"output_tokens": len(self.sample.token_ids)},
                **sample_fields(completion, choice),
            }
        )
        events.append({"type": "message_stop"})
        return events

    @staticmethod
    def error(status: int, message: str, code: str | None) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": "api_error" if status >= 500 else "invalid_request_error", "message": message, "code": code},
        }
