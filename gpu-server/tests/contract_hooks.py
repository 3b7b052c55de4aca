"""schemathesis hooks for test_openapi_contract.py (SCHEMATHESIS_HOOKS=contract_hooks).

A few values of a valid request must name what exists on the server under test, which no JSON
Schema can say: a folder to load an adapter from, modules the base model has, a provenance tag this
server signed; some bounds are the server's configuration (--max-n) or the model's context; and
an SFT conversation needs an assistant turn after what it answers, which the schema states in words
(as `contains`, schemathesis's generator does not finish). The hook puts such values in place
before each call; schemathesis then checks the request again against
the schema, so a request the hook makes valid counts as valid, and one still invalid as invalid.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

ADAPTER_FOLDER = os.environ.get("ART_CONTRACT_ADAPTER", "")  # a real PEFT adapter folder on the server
MAX_N = 4  # under the server's --max-n
MAX_TOKENS = 16  # far inside the test model's context, whatever the prompt
# Not validity but work: a step of 1,000 gradient steps or epochs, or over 100,000 conversations, is
# valid and takes hours here; the training routes get small bodies (lists cut to their first items).
WORK = {"gradient_steps": 2, "epochs": 1}
MAX_ITEMS = 4


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    body = case.body
    if not isinstance(body, dict):
        return
    path = case.operation.path
    if path == "/v1/load_lora_adapter" and "lora_path" in body:
        body["lora_path"] = ADAPTER_FOLDER
    elif path == "/v1/art/models/register" and isinstance(body.get("lora"), dict) and "target_modules" in body["lora"]:
        body["lora"]["target_modules"] = ["q_proj", "v_proj"]
    elif path.endswith("/train"):
        _drop_provenance(body.get("groups"))
    if path.endswith(("/train", "/train_sft", "/log")):
        _shorten(body)
    if path.endswith("/train_sft"):
        for conversation in body.get("conversations") or []:
            messages = conversation.get("messages") if isinstance(conversation, dict) else None
            if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
                if messages[0].get("role") == "assistant":
                    messages.insert(0, {"role": "user", "content": "Hi"})
                messages.append({"role": "assistant", "content": "Hello"})
    if path.endswith(("/train", "/train_sft")) and isinstance(body.get("config"), dict):
        _cap(body["config"], WORK)
    elif path == "/v1/chat/completions":
        _cap(body, {"n": MAX_N, "max_tokens": MAX_TOKENS, "max_completion_tokens": MAX_TOKENS})


def _cap(fields: dict[str, Any], caps: dict[str, int]) -> None:
    """Integers over their cap come down to it (values of another type are left to the schema)."""
    for key, cap in caps.items():
        value = fields.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > cap:
            fields[key] = cap


def _drop_provenance(node: Any) -> None:
    """Hand-built choices carry no provenance; a made-up tag is refused as not this server's."""
    if isinstance(node, dict):
        node.pop("art_provenance", None)
        for value in node.values():
            _drop_provenance(value)
    elif isinstance(node, list):
        for value in node:
            _drop_provenance(value)


def _shorten(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, list) and len(value) > MAX_ITEMS:
                node[key] = value = value[:MAX_ITEMS]
            _shorten(value)
    elif isinstance(node, list):
        for value in node:
            _shorten(value)
