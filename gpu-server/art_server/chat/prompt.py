"""Messages (OpenAI shape) to prompt token ids through the model's own chat template."""

from __future__ import annotations

import json
from typing import Any

from .tool_calls import hermes_call_text, hermes_tools_system_text


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
        m: dict[str, Any] = {
            "role": "system" if message["role"] == "developer" else message["role"],
            "content": content_text(message.get("content")),
        }
        if message.get("tool_calls"):
            m["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))},
                }
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


def template_renders_tools(tokenizer: Any) -> bool:
    template = tokenizer.chat_template
    return isinstance(template, str) and "tools" in template


def tools_as_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For a chat template that knows no tools (SmolLM2's): the tool list joins the system message,
    assistant tool calls become `<tool_call>` text and tool results `<tool_response>` user turns, the
    hermes format that chat/tool_calls.py parses."""
    system = hermes_tools_system_text(tools)
    if messages and messages[0]["role"] == "system":
        system = f"{messages[0]['content']}\n\n{system}"
        messages = messages[1:]
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "\n".join(hermes_call_text(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"])
            out.append({"role": "assistant", "content": f"{m['content']}\n{calls}" if m["content"] else calls})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append(m)
    return out


def prompt_token_ids(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool = True
) -> list[int]:
    rendered = template_messages(messages)
    if tools and not template_renders_tools(tokenizer):
        rendered, tools = tools_as_text(rendered, tools), None
    try:
        encoded = tokenizer.apply_chat_template(
            rendered,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
        )
    except PromptError:
        raise
    except Exception as error:  # jinja errors, templates that reject a role order, ...
        raise PromptError(f"the chat template could not render these messages: {error}") from error
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return list(ids)
