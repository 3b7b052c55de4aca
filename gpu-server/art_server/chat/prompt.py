"""Messages (OpenAI shape) to prompt token ids through the model's own chat template."""

from __future__ import annotations

import json
from typing import Any


class PromptError(ValueError):
    """The messages cannot be rendered by the chat template (a 400 for the caller)."""


def content_text(content: Any) -> str:
    """OpenAI content is a string, null, or a list of parts; the templates take a string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            raise PromptError(f"content part of type {kind!r} is not supported (only 'text')")
        texts.append(part.get("text", ""))
    return "".join(texts)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalises messages for Jinja chat templates (string content, tool-call arguments kept as
    JSON strings; the template decides how to print them)."""
    out = []
    for message in messages:
        m: dict[str, Any] = {"role": "system" if message["role"] == "developer" else message["role"],
                             "content": content_text(message.get("content"))}
        if message.get("tool_calls"):
            m["tool_calls"] = [
                {"id": c.get("id"), "type": "function",
                 "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}}
                for c in message["tool_calls"]
            ]
        for key in ("tool_call_id", "name"):
            if message.get(key) is not None:
                m[key] = message[key]
        out.append(m)
    return out


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments if arguments is not None else {}


def prompt_token_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     add_generation_prompt: bool = True) -> list[int]:
    try:
        encoded = tokenizer.apply_chat_template(
            template_messages(messages), tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=True,
        )
    except PromptError:
        raise
    except Exception as error:  # jinja errors, templates that reject a role order, ...
        raise PromptError(f"the chat template could not render these messages: {error}") from error
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return list(ids)
