"""One conversation (instructions, a user turn, a tool call and its result, the next user turn) in
each API's own form, and readers of each API's answers and streams: tests send all three and compare."""

from __future__ import annotations

import json
from typing import Any

import httpx

TOOL = {
    "name": "add",
    "description": "Adds two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
}
SYSTEM, QUESTION, FOLLOW_UP = "You add numbers with the tool.", "What is 3 + 4?", "And now say it in words."
CALL = {"id": "call_1", "name": "add", "arguments": '{"a": 3, "b": 4}'}


def chat_body(model: str, max_tokens: int = 6, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "tools": [{"type": "function", "function": TOOL}],
        **extra,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": CALL["id"], "type": "function", "function": {"name": CALL["name"], "arguments": CALL["arguments"]}}
                ],
            },
            {"role": "tool", "tool_call_id": CALL["id"], "content": "7"},
            {"role": "user", "content": FOLLOW_UP},
        ],
    }


def responses_body(model: str, max_tokens: int = 6, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_output_tokens": max_tokens,
        "temperature": 0,
        "instructions": SYSTEM,
        "tools": [{"type": "function", **TOOL, "strict": True}],
        **extra,
        "input": [
            {"role": "user", "content": QUESTION},
            {"type": "function_call", "call_id": CALL["id"], "name": CALL["name"], "arguments": CALL["arguments"]},
            {"type": "function_call_output", "call_id": CALL["id"], "output": "7"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": FOLLOW_UP}]},
        ],
    }


def messages_body(model: str, max_tokens: int = 6, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "system": [{"type": "text", "text": SYSTEM}],
        "tools": [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}],
        **extra,
        "messages": [
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": CALL["id"], "name": CALL["name"], "input": json.loads(CALL["arguments"])}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": CALL["id"], "content": "7"},
                    {"type": "text", "text": FOLLOW_UP},
                ],
            },
        ],
    }


def events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (event name, data) pairs of a streamed answer."""
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        text = r.read().decode()
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def sample_of(answer: dict[str, Any]) -> tuple[list[int], list[int], list[float], str]:
    """Prompt ids, token ids, logprobs and provenance tag of a Responses or Messages answer."""
    return (
        answer["prompt_token_ids"],
        answer["token_ids"],
        [e["logprob"] for e in answer["logprobs"]["content"]],
        answer["art_provenance"],
    )


def chat_sample(completion: dict[str, Any]) -> tuple[list[int], list[int], list[float], str]:
    choice = completion["choices"][0]
    return (
        completion["prompt_token_ids"],
        choice["token_ids"],
        [e["logprob"] for e in choice["logprobs"]["content"]],
        choice["art_provenance"],
    )


def three_apis(client: httpx.Client, model: str) -> dict[str, Any]:
    """The same conversation sent greedily as chat, Responses and Messages, JSON and streamed."""
    chat = client.post("/v1/chat/completions", json=chat_body(model))
    responses = client.post("/v1/responses", json=responses_body(model))
    messages = client.post("/v1/messages", json=messages_body(model))
    for r in (chat, responses, messages):
        assert r.status_code == 200, r.text
    streamed_response = events(client, "/v1/responses", responses_body(model))[-1][1]["response"]
    message_events = events(client, "/v1/messages", messages_body(model))
    start = next(data["message"] for name, data in message_events if name == "message_start")
    delta = next(data for name, data in message_events if name == "message_delta")
    return {
        "chat": chat_sample(chat.json()),
        "responses": sample_of(responses.json()),
        "messages": sample_of(messages.json()),
        "responses_streamed": sample_of(streamed_response),
        "messages_streamed": sample_of({**delta, "prompt_token_ids": start["prompt_token_ids"]}),
        "answers": {"responses": responses.json(), "messages": messages.json()},
    }
