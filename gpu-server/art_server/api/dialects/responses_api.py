"""OpenAI's Responses API (`POST /v1/responses`) as chat completions (see api/dialects/dialect.py).

Served: `instructions`, `input` as a string or items (messages with text parts, `function_call`,
`function_call_output`), function tools, `tool_choice` auto/none, `temperature`, `top_p`,
`max_output_tokens`, `top_logprobs`, streaming (the API's own event sequence). Accepted without
effect on sampling: `store` (nothing is stored: the answer says `store: false`), `metadata`, `user`,
`safety_identifier`, `prompt_cache_key`, `service_tier`, `parallel_tool_calls`, `include` of
`message.output_text.logprobs`. Anything else (stored responses, hosted tools, images, reasoning,
structured output) is a 400 naming the field.

Over 400 lines: one dialect both ways (the request into chat completions, the answer and its stream events back), which are read side by side.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue

from ...core.json_types import INTEGRAL
from ..schemas import MAX_TOKENS_PER_SEQUENCE, JsonObject
from .dialect import (
    Forbidding,
    StreamedSample,
    invalid,
    json_safe,
    new_id,
    not_served,
    sample_fields,
    text_of,
    unsupported,
)

LOGPROBS_INCLUDE = "message.output_text.logprobs"
TEXT_PARTS = ("input_text", "output_text", "text")
HOSTED_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "computer_use_preview",
    "computer",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "custom",
    "tool_search",
)


class ResponsesRequest(Forbidding):
    model: str = Field(min_length=1)
    input: str | list[JsonObject]
    instructions: str | None = None
    tools: list[JsonObject] | None = None
    tool_choice: str | JsonObject | None = Field(
        None, json_schema_extra={"anyOf": [{"enum": ["auto", "none"]}, {"type": "null"}]}
    )
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_output_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE), INTEGRAL] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20), INTEGRAL] | None = None
    stream: bool = False
    include: list[str] | None = Field(
        None, json_schema_extra={"anyOf": [{"type": "array", "items": {"const": LOGPROBS_INCLUDE}}, {"type": "null"}]}
    )
    # No effect on what is sampled:
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: Literal["auto", "default", "flex", "priority"] | None = None
    parallel_tool_calls: bool | None = None
    stream_options: JsonObject | None = None
    # Not served: a 400 that names them (below) when set.
    previous_response_id: JsonValue = not_served()
    conversation: JsonValue = not_served()
    prompt: JsonValue = not_served()
    background: JsonValue = not_served(const=False)
    reasoning: JsonValue = not_served(type="object", maxProperties=0)
    text: JsonObject | None = None
    truncation: str | None = not_served(const="disabled")
    max_tool_calls: JsonValue = not_served()
    context_management: JsonValue = not_served()


def chat_request(request: ResponsesRequest) -> dict[str, Any]:
    """The equivalent chat-completions request (the body a ChatCompletionRequest validates)."""
    _refuse_unserved(request)
    body: dict[str, Any] = {"model": request.model, "messages": _messages(request), "stream": request.stream, "logprobs": True}
    if request.tools:
        body["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        if request.tool_choice not in ("auto", "none"):
            raise unsupported("tool_choice", f"tool_choice {request.tool_choice!r}", "it supports 'auto' and 'none'")
        body["tool_choice"] = request.tool_choice
    for name, chat_name in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("top_logprobs", "top_logprobs"),
    ):
        if getattr(request, name) is not None:
            body[chat_name] = getattr(request, name)
    return body


def _refuse_unserved(request: ResponsesRequest) -> None:
    if request.previous_response_id is not None or request.conversation is not None:
        field = "previous_response_id" if request.previous_response_id is not None else "conversation"
        raise unsupported(
            field,
            "continuing a stored response",
            "this server stores no responses: send the whole "
            "conversation in `input` (the AI SDK: providerOptions.openai.store = false)",
        )
    for field, what in (
        ("prompt", "a stored prompt template"),
        ("max_tool_calls", "max_tool_calls"),
        ("context_management", "context_management"),
    ):
        if getattr(request, field) is not None:
            raise unsupported(field, what)
    if request.background is not None and request.background is not False:
        raise unsupported("background", "background mode")
    if request.reasoning not in (None, {}):
        raise unsupported("reasoning", "reasoning settings", "this server's models have no reasoning effort")
    if request.truncation not in (None, "disabled"):
        raise unsupported("truncation", f"truncation {request.truncation!r}", "a prompt longer than the context is a 400")
    fmt = (request.text or {}).get("format")
    if request.text and (set(request.text) - {"format", "verbosity"} or (fmt not in (None, {"type": "text"}))):
        raise unsupported(
            "text",
            "structured output (text.format other than text) and text options",
            "ask for JSON in the instructions and parse the text",
        )
    for k, value in enumerate(request.include or []):
        if value != LOGPROBS_INCLUDE:
            raise unsupported(f"include[{k}]", f"include {value!r}", f"it supports {LOGPROBS_INCLUDE!r}")


def _messages(request: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
        return messages
    if not request.input:
        raise invalid("input", "must hold at least one item")
    calls: set[str] = set()
    for i, item in enumerate(request.input):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise invalid(f"{where}.role", "must be 'user', 'system', 'developer' or 'assistant'")
            if "content" not in item:
                raise invalid(f"{where}.content", "is required")
            messages.append({"role": role, "content": text_of(item["content"], f"{where}.content", TEXT_PARTS)})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise invalid(where, "a function_call needs a call_id and a name (strings)")
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                raise invalid(f"{where}.arguments", "must be a JSON string")
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            # One sampled turn is [message?, function_call...] in this API and one assistant message in chat.
            if last and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                if last["content"] == "":
                    last["content"] = None
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            calls.add(call_id)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or call_id not in calls:
                raise invalid(f"{where}.call_id", f"{str(call_id)[:80]!r} answers no function_call earlier in input")
            if "output" not in item:
                raise invalid(f"{where}.output", "is required")
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": text_of(item["output"], f"{where}.output", TEXT_PARTS)}
            )
        elif kind == "item_reference":
            raise unsupported(
                f"{where}.type",
                "item_reference (an item of a stored response)",
                "send the item itself: the AI SDK sends them with providerOptions.openai.store = false, "
                "and model.fetch expands the ones it saw",
            )
        elif kind == "reasoning":
            raise unsupported(f"{where}.type", "a reasoning item")
        elif isinstance(kind, str) and (kind.endswith(("_call", "_call_output"))):
            raise unsupported(f"{where}.type", f"a built-in tool's item ({kind!r})", "only function tools are served")
        else:
            raise invalid(
                f"{where}.type",
                f"{str(kind)[:80]!r} is not an input item type this server knows (message, function_call, function_call_output)",
            )
    return messages


def _tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    kind = tool.get("type")
    if kind != "function":
        if isinstance(kind, str) and (kind in HOSTED_TOOLS or kind.startswith(HOSTED_TOOLS)):
            raise unsupported(f"{where}.type", f"the built-in tool {kind!r}", "only function tools are served")
        raise invalid(f"{where}.type", "must be 'function'")
    unknown = set(tool) - {"type", "name", "description", "parameters", "strict"}
    if unknown:
        raise invalid(where, f"unknown field(s) {sorted(unknown)} in a function tool")
    function = {key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None}
    return {"type": "function", "function": function}  # `strict` is not enforced: arguments are sampled freely


# -- answers -------------------------------------------------------------------------------------


def _output(choice: dict[str, Any], logprobs: bool) -> list[dict[str, Any]]:
    message = choice["message"]
    items: list[dict[str, Any]] = []
    text = message.get("content")
    if text or not message.get("tool_calls"):
        items.append(_message_item(new_id("msg"), text or "", choice if logprobs else None, "completed"))
    for call in message.get("tool_calls") or []:
        items.append(_call_item(new_id("fc"), call, call["function"]["arguments"], "completed"))
    return items


def _message_item(item_id: str, text: str, choice: dict[str, Any] | None, status: str) -> dict[str, Any]:
    entries = ((choice or {}).get("logprobs") or {}).get("content") or []
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": entries}],
    }


def _call_item(item_id: str, call: dict[str, Any], arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call["id"],
        "name": call["function"]["name"],
        "arguments": arguments,
        "status": status,
    }


def response_object(
    request: ResponsesRequest,
    response_id: str,
    created: int,
    completion: dict[str, Any] | None,
    output: list[dict[str, Any]],
    status: str = "completed",
) -> dict[str, Any]:
    choice = (completion or {}).get("choices", [{}])[0] if completion else {}
    incomplete = choice.get("finish_reason") == "length"
    prompt_tokens = len((completion or {}).get("prompt_token_ids") or [])
    output_tokens = len(choice.get("token_ids") or [])
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": "incomplete" if completion and incomplete else status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if completion and incomplete else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": None,
        "store": False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "text": {"format": {"type": "text"}},
        "tool_choice": request.tool_choice or "auto",
        "tools": json_safe(request.tools or []),
        "truncation": "disabled",
        "metadata": request.metadata or {},
        "user": request.user,
        "usage": None
        if completion is None
        else {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + output_tokens,
        },
    }
    if completion is not None:
        response.update(sample_fields(completion, choice))
    return response


def response_json(request: ResponsesRequest, completion: dict[str, Any]) -> dict[str, Any]:
    """The Response object of a (tagged) chat completion."""
    choice = completion["choices"][0]
    logprobs = LOGPROBS_INCLUDE in (request.include or [])
    return response_object(
        request, new_id("resp"), completion.get("created") or int(time.time()), completion, _output(choice, logprobs)
    )


class ResponseEvents:
    """Chat chunks in, the Responses API's stream events out (`response.created` ...
    `response.completed`), each with its `sequence_number`."""

    def __init__(self, request: ResponsesRequest):
        self.request = request
        self.id = new_id("resp")
        self.created = int(time.time())
        self.sample = StreamedSample()
        self.sequence = 0
        self.message_id: str | None = None
        self.output: list[dict[str, Any]] = []

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def take(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events = []
        if self.sequence == 0:
            shell = response_object(self.request, self.id, self.created, None, [], "in_progress")
            events += [self._event("response.created", response=shell), self._event("response.in_progress", response=shell)]
        text = self.sample.take(chunk)
        if text:
            if self.message_id is None:
                self.message_id = new_id("msg")
                events.append(
                    self._event(
                        "response.output_item.added",
                        output_index=0,
                        item=_message_item(self.message_id, "", None, "in_progress") | {"content": []},
                    )
                )
                events.append(
                    self._event(
                        "response.content_part.added",
                        item_id=self.message_id,
                        output_index=0,
                        content_index=0,
                        part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                    )
                )
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self.message_id,
                    output_index=0,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        if self.sample.finish is not None:
            events += self._finish()
        return events

    def _finish(self) -> list[dict[str, Any]]:
        completion, choice = self.sample.completion()
        message = choice["message"]
        calls = message.get("tool_calls") or []
        events = []
        if self.message_id is None and not calls:  # an empty answer is still one (empty) message
            self.message_id = new_id("msg")
            events.append(
                self._event(
                    "response.output_item.added",
                    output_index=0,
                    item=_message_item(self.message_id, "", None, "in_progress") | {"content": []},
                )
            )
        if self.message_id is not None:
            logprobs = LOGPROBS_INCLUDE in (self.request.include or [])
            item = _message_item(self.message_id, message.get("content") or "", choice if logprobs else None, "completed")
            part = item["content"][0]
            events += [
                self._event(
                    "response.output_text.done",
                    item_id=self.message_id,
                    output_index=0,
                    content_index=0,
                    text=part["text"],
                    logprobs=part["logprobs"],
                ),
                self._event("response.content_part.done", item_id=self.message_id, output_index=0, content_index=0, part=part),
                self._event("response.output_item.done", output_index=0, item=item),
            ]
            self.output.append(item)
        for call in calls:
            index = len(self.output)
            item = _call_item(new_id("fc"), call, call["function"]["arguments"], "completed")
            events += [
                self._event(
                    "response.output_item.added", output_index=index, item=item | {"arguments": "", "status": "in_progress"}
                ),
                self._event(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=item["arguments"]
                ),
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                ),
                self._event("response.output_item.done", output_index=index, item=item),
            ]
            self.output.append(item)
        completion["choices"] = [choice]
        final = response_object(self.request, self.id, self.created, completion, self.output)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return events + [self._event(kind, response=final)]

    def error(self, status: int, message: str, code: str | None) -> dict[str, Any]:
        # `error` at the top as well: the openai SDK raises an APIError for a stream event that has one.
        return self._event(
            "error",
            code=code,
            message=message,
            param=None,
            error={"type": "server_error" if status >= 500 else "invalid_request_error", "code": code, "message": message},
        )
