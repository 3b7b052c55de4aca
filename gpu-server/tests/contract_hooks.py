"""schemathesis hooks for test_openapi_contract.py (SCHEMATHESIS_HOOKS=contract_hooks).

A few values of a valid request must name what exists on the server under test, which no JSON
Schema can say: the model a training route trains, a folder to load an adapter from, modules and
token ids the base model has, a provenance tag this server signed; a prompt must fit the model's
context (the server's own limits, such as --max-n, are in the schema it serves); and an SFT conversation needs an assistant turn
after what it answers, which the schema states in words (as `contains`, schemathesis's generator
does not finish). The hook puts such values in place before each call; schemathesis then checks the
request again against the schema, so a request the hook makes valid counts as valid, and one still
invalid as invalid.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import schemathesis

from art_server.core.names import NAME_PATTERN

ADAPTER_FOLDER = os.environ.get("ART_CONTRACT_ADAPTER", "")  # a real PEFT adapter folder on the server
# A registered model that the training routes' valid requests train, log to and prune: without it
# they would name models that do not exist, and a 404 says nothing about the body.
MODEL = os.environ.get("ART_CONTRACT_MODEL", "")
VOCABULARY = int(os.environ.get("ART_CONTRACT_VOCABULARY", "0"))  # token ids index the base model's
NAME = re.compile(NAME_PATTERN)
MODEL_ROUTES = ("/train", "/train_sft", "/log", "/delete_checkpoints", "/fork")
PARENT = os.environ.get("ART_CONTRACT_PARENT", "")  # a model in MODEL's project a fork can start from
MAX_N = 4  # not validity but work (the schema states --max-n): n completions of MAX_TOKENS each
# Not validity but work: without a budget a completion runs to the end of the model's context, and
# thousands of them take the run's time; each sampling route gets a short one (its own field name).
TOKEN_BUDGET = {"/v1/chat/completions": "max_tokens", "/v1/responses": "max_output_tokens", "/v1/messages": "max_tokens"}
MAX_TOKENS = 16
# Not validity but work: a step of 1,000 gradient steps or epochs, or over 100,000 conversations, is
# valid and takes hours here; the training routes get small bodies (lists cut to their first items).
WORK = {"gradient_steps": 2, "epochs": 1}
MAX_ITEMS = 4
KNOWN_FIELDS = {"messages", "tools", "role", "content", "name", "tool_calls", "tool_call_id", "id", "type", "function"}
KNOWN_FIELDS |= {"arguments", "description", "parameters", "text"}
MAX_CHARS = 32
MAX_DEPTH = 4


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    path = case.operation.path
    if path.startswith("/v1/art/models/{name}/") and path.endswith(MODEL_ROUTES) and MODEL:
        name = (case.path_parameters or {}).get("name")
        if isinstance(name, str) and NAME.fullmatch(name):  # a name the schema refuses stays as it is
            case.path_parameters["name"] = MODEL
    body = case.body
    if not isinstance(body, dict):
        return
    if path == "/v1/load_lora_adapter" and "lora_path" in body:
        body["lora_path"] = ADAPTER_FOLDER
    elif path == "/v1/art/models/register" and isinstance(body.get("lora"), dict) and "target_modules" in body["lora"]:
        body["lora"]["target_modules"] = ["q_proj", "v_proj"]
    elif path.endswith("/fork") and PARENT:
        if isinstance(body.get("from_model"), str) and NAME.fullmatch(body["from_model"]):
            body["from_model"] = PARENT
        if isinstance(body.get("from_project"), str) and NAME.fullmatch(body["from_project"]):
            body.pop("from_project")  # the model's own project, where the parent is
    elif path.endswith(("/train", "/log")):
        _drop_provenance(body.get("groups"))
        _within_vocabulary(body.get("groups"))
    if path.endswith(("/train", "/train_sft", "/log")):
        _shorten(body)
    if path.endswith("/train_sft"):
        _compact(body.get("conversations"), depth=0)
        for conversation in body.get("conversations") or []:
            messages = conversation.get("messages") if isinstance(conversation, dict) else None
            if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
                if messages[0].get("role") == "assistant":
                    messages.insert(0, {"role": "user", "content": "Hi"})
                messages.append({"role": "assistant", "content": "Hello"})
    if path.endswith(("/train", "/train_sft")) and isinstance(body.get("config"), dict):
        _cap(body["config"], WORK)
    elif path in TOKEN_BUDGET:
        _cap(body, {"n": MAX_N, "max_tokens": MAX_TOKENS, "max_completion_tokens": MAX_TOKENS, "max_output_tokens": MAX_TOKENS})
        _enforceable_schema(body.get("response_format"))
        if not any(key in body for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")):
            body[TOKEN_BUDGET[path]] = MAX_TOKENS


def _enforceable_schema(response_format: Any) -> None:
    """A response_format's JSON schema is any object to the OpenAPI document; which schemas can be
    enforced while sampling is lm-format-enforcer's to say (a 400 otherwise), so a generated one
    becomes a schema it follows."""
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
        spec["schema"] = {"type": "object", "properties": {"answer": {"type": "string"}}}


def _cap(fields: dict[str, Any], caps: dict[str, int]) -> None:
    """Integers over their cap come down to it, 968.0 too (the schema takes an integral number as an
    integer); values of another type are left to the schema."""
    for key, cap in caps.items():
        value = fields.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer() and value > cap:
            fields[key] = cap


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in `node`, each before what it holds (which the caller may change first)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


def _drop_provenance(node: Any) -> None:
    """Hand-built choices carry no provenance; a made-up tag is refused as not this server's."""
    for item in _objects(node):
        item.pop("art_provenance", None)


def _within_vocabulary(node: Any) -> None:
    """Token ids the schema allows (up to 2**31 - 1) the test model's vocabulary does not have."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("prompt_token_ids", "token_ids") and isinstance(value, list) and VOCABULARY:
                node[key] = [_token(t) for t in value]
            else:
                _within_vocabulary(value)
    elif isinstance(node, list):
        for value in node:
            _within_vocabulary(value)


def _compact(node: Any, depth: int) -> None:
    """An SFT conversation must fit the model's context (2,048 tokens here), which fuzzed text and
    tool schemas of several kilobytes do not: strings are cut, and objects keep the fields the
    server reads and two others."""
    if isinstance(node, dict):
        extra = [key for key in node if key not in KNOWN_FIELDS]
        for key in extra[2:] if depth < MAX_DEPTH else extra:
            del node[key]
        for key, value in node.items():
            if isinstance(value, str):
                node[key] = value[:MAX_CHARS]
            else:
                _compact(value, depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, str):
                node[i] = value[:MAX_CHARS]
            else:
                _compact(value, depth + 1)


def _token(value: Any) -> Any:
    """A valid id (an integer, 3.0 included, from 0) into the vocabulary; any other value as it is."""
    integral = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
    return int(value) % VOCABULARY if integral and value >= 0 else value


def _shorten(node: Any) -> None:
    for item in _objects(node):
        for key, value in item.items():
            if isinstance(value, list) and len(value) > MAX_ITEMS:
                item[key] = value[:MAX_ITEMS]
