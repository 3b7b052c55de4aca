"""Tool calls in the hermes format used by Qwen2.5 chat templates:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A block whose JSON does not parse, or lacks a name, stays in the content as text: the model did
not make a valid call, and the reward code should see what it wrote.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass
class ParsedToolCall:
    id: str
    name: str
    arguments: str  # a JSON string, as the OpenAI API carries it


def parse_tool_calls(text: str) -> tuple[str | None, list[ParsedToolCall]]:
    """Splits model output into (content, tool calls). Content is None when only calls remain."""
    calls: list[ParsedToolCall] = []
    kept: list[str] = []
    last = 0
    for match in TOOL_CALL_RE.finditer(text):
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            continue
        arguments = payload.get("arguments", payload.get("parameters", {}))
        calls.append(
            ParsedToolCall(
                id=f"call_{secrets.token_hex(12)}",
                name=payload["name"],
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
            )
        )
        kept.append(text[last : match.start()])
        last = match.end()
    if not calls:
        return text, []
    kept.append(text[last:])
    content = "".join(kept).strip()
    return (content or None), calls


# -- rendering, for chat templates that know no tools ----------------------------------------------
# The same text the built-in models' template (and Qwen2.5's) writes, so a model that has never seen
# tools gets the format the parser above reads.


def hermes_tools_system_text(tools: list[dict]) -> str:
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def hermes_call_text(name: str, arguments: object) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
