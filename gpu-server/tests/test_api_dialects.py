"""The Responses API (/v1/responses) and Anthropic's Messages API (/v1/messages) on the real server
(hf engine, builtin:tiny; the vLLM engine's run is in test_vllm_real.py): each request renders to
exactly the prompt ids of the equivalent chat request and samples what it samples; answers and
streams have each API's shape and carry token ids, logprobs and the provenance tag the trainer
checks (a GRPO step trains on them); what is not served is a 400 naming the field."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from art_server.api.dialects import messages_api, responses_api

from conftest import ServerProcess, start_server
from dialects import CALL, events, messages_body, responses_body, three_apis


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(tmp_path_factory.mktemp("dialects"), "--base-model", "builtin:tiny")
    with s.client() as c:
        assert (
            c.post("/v1/art/models/register", json={"name": "dialects", "project": "p", "base_model": "builtin:tiny"}).status_code
            == 200
        )
    yield s
    s.stop()


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(a, b))


def test_each_api_renders_the_chat_requests_prompt_ids_and_samples_the_same_tokens(server):
    with server.client() as c:
        got = three_apis(c, "dialects")
    prompt, tokens, logprobs, _ = got["chat"]
    for api in ("responses", "messages", "responses_streamed", "messages_streamed"):
        assert got[api][0] == prompt, api
        assert got[api][1] == tokens, api
        assert close(got[api][2], logprobs), api
        assert got[api][3].startswith("art1:"), api
    response, message = got["answers"]["responses"], got["answers"]["messages"]
    assert response["object"] == "response" and response["status"] == "incomplete" and response["store"] is False
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["input_tokens"] == len(prompt) and response["usage"]["output_tokens"] == len(tokens)
    assert response["output"][0]["type"] == "message" and response["output"][0]["content"][0]["type"] == "output_text"
    assert response["art_policy_step"] == 0  # the bare name of a registered model: its step 0
    assert message["type"] == "message" and message["stop_reason"] == "max_tokens" and message["content"][0]["type"] == "text"
    assert message["usage"] == {
        "input_tokens": len(prompt),
        "output_tokens": len(tokens),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_a_grpo_step_trains_on_answers_of_both_apis(server):
    with server.client() as c:
        group = []
        for reward, (path, body, read) in enumerate(
            [
                ("/v1/responses", responses_body("dialects", temperature=1.0), lambda a: a),
                ("/v1/messages", messages_body("dialects", temperature=1.0), lambda a: a),
            ]
        ):
            answer = read(c.post(path, json=body).json())
            group.append(
                {
                    "reward": float(reward),
                    "messages_and_choices": [
                        {"role": "user", "content": "hi"},
                        {
                            "kind": "choice",
                            "message": {"role": "assistant", "content": "x"},
                            "prompt_token_ids": answer["prompt_token_ids"],
                            "token_ids": answer["token_ids"],
                            "logprobs": [e["logprob"] for e in answer["logprobs"]["content"]],
                            "finish_reason": "length",
                            "art_provenance": answer["art_provenance"],
                            "art_policy_step": answer["art_policy_step"],
                            "art_sampling": answer["art_sampling"],
                        },
                    ],
                }
            )
        r = c.post("/v1/art/models/dialects/train", json={"groups": [group], "config": {"learning_rate": 1e-4}})
        assert r.status_code == 200, r.text
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert lines[-1]["type"] == "result", lines[-1]
        metrics = lines[-1]["metrics"]
        assert metrics["trajectories_trained"] == 2 and metrics["sampler_logprob_diff_max"] < 1e-3
        assert not any("provenance" in json.dumps(line) for line in lines[:-1]), lines  # tagged here: no warning


def test_the_streams_are_each_apis_event_sequence(server):
    with server.client() as c:
        response_events = events(c, "/v1/responses", responses_body("builtin:tiny"))
        message_events = events(c, "/v1/messages", messages_body("builtin:tiny"))
    names = [name for name, _ in response_events]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] in (
        "response.completed",
        "response.incomplete",
    )
    assert [data["sequence_number"] for _, data in response_events] == list(range(len(response_events)))
    assert all(name == data["type"] for name, data in response_events)
    text = "".join(data["delta"] for name, data in response_events if name == "response.output_text.delta")
    final = response_events[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == text
    names = [name for name, _ in message_events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    text = "".join(data["delta"]["text"] for name, data in message_events if name == "content_block_delta")
    assert text and names.count("content_block_start") == names.count("content_block_stop") == 1


def test_a_tool_call_is_a_function_call_item_and_a_tool_use_block_json_and_streamed():
    # The translation of a sampled answer that called a tool (the tiny model calls none untaught;
    # the TypeScript tests teach it and run every SDK's tool loop).
    completion = {
        "id": "c",
        "created": 1,
        "prompt_token_ids": [1, 2],
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "token_ids": [5, 6, 7],
                "logprobs": {"content": [{"logprob": -0.5}] * 3},
                "art_provenance": "art1:x",
                "message": {
                    "role": "assistant",
                    "content": "Let me add.",
                    "tool_calls": [
                        {"id": CALL["id"], "type": "function", "function": {"name": "add", "arguments": CALL["arguments"]}}
                    ],
                },
            }
        ],
    }
    request = responses_api.ResponsesRequest.model_validate(responses_body("m"))
    output = responses_api.response_json(request, completion)["output"]
    assert [item["type"] for item in output] == ["message", "function_call"]
    assert output[1]["call_id"] == CALL["id"] and output[1]["arguments"] == CALL["arguments"]
    message = messages_api.message_json(messages_api.MessagesRequest.model_validate(messages_body("m")), completion)
    assert message["stop_reason"] == "tool_use"
    assert message["content"] == [
        {"type": "text", "text": "Let me add."},
        {"type": "tool_use", "id": CALL["id"], "name": "add", "input": {"a": 3, "b": 4}},
    ]
    chunks = [
        {"prompt_token_ids": [1, 2], "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "Let me add.\n"},
                    "token_ids": [5, 6],
                    "logprobs": {"content": [{"logprob": -0.5}] * 2},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"content": ""}, "token_ids": [7], "logprobs": {"content": [{"logprob": -0.5}]}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "art_provenance": "art1:x",
                    "token_ids": [],
                    "delta": {"tool_calls": [{"index": 0, **completion["choices"][0]["message"]["tool_calls"][0]}]},
                }
            ]
        },
    ]
    stream = responses_api.ResponseEvents(request)
    out = [event for chunk in chunks for event in stream.take(chunk)]
    final = out[-1]["response"]
    assert out[-1]["type"] == "response.completed" and [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert final["output"][0]["content"][0]["text"] == "Let me add." and final["token_ids"] == [5, 6, 7]
    assert any(e["type"] == "response.function_call_arguments.done" and e["arguments"] == CALL["arguments"] for e in out)
    stream = messages_api.MessageEvents(messages_api.MessagesRequest.model_validate(messages_body("m")))
    out = [event for chunk in chunks for event in stream.take(chunk)]
    starts = [e["content_block"]["type"] for e in out if e["type"] == "content_block_start"]
    assert starts == ["text", "tool_use"]
    assert next(e for e in out if e["type"] == "message_delta")["delta"]["stop_reason"] == "tool_use"
    assert any(e.get("delta", {}).get("partial_json") == '{"a": 3, "b": 4}' for e in out)


def test_a_stop_sequence_is_named_in_the_messages_answer():
    request = messages_api.MessagesRequest.model_validate(messages_body("m", stop_sequences=["END"]))
    completion = {
        "prompt_token_ids": [1],
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "stop_reason": "END",
                "token_ids": [2],
                "logprobs": {"content": [{"logprob": -1.0}]},
                "message": {"role": "assistant", "content": "done"},
            }
        ],
    }
    message = messages_api.message_json(request, completion)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    assert messages_api.chat_request(request)["stop"] == ["END"]


UNSERVED: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/responses", {"previous_response_id": "resp_1"}, "previous_response_id"),
    ("/v1/responses", {"conversation": "conv_1"}, "conversation"),
    ("/v1/responses", {"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ("/v1/responses", {"reasoning": {"effort": "high"}}, "reasoning"),
    ("/v1/responses", {"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}}, "text"),
    ("/v1/responses", {"include": ["reasoning.encrypted_content"]}, "include[0]"),
    ("/v1/responses", {"tool_choice": "required"}, "tool_choice"),
    ("/v1/responses", {"background": True}, "background"),
    ("/v1/responses", {"frequency_penalty": 1}, "frequency_penalty"),
    ("/v1/responses", {"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    (
        "/v1/responses",
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
        "input[0].content[0]",
    ),
    ("/v1/responses", {"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ("/v1/responses", {"input": [{"type": "web_search_call", "id": "w"}]}, "input[0].type"),
    ("/v1/responses", {"input": [{"type": "bogus"}]}, "input[0].type"),
    ("/v1/responses", {"input": [{"type": "function_call_output", "call_id": "nope", "output": "1"}]}, "input[0].call_id"),
    ("/v1/responses", {"input": [{"type": "function_call", "name": "add"}]}, "input[0]"),
    ("/v1/responses", {"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ("/v1/responses", {"input": []}, "input"),
    ("/v1/messages", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ("/v1/messages", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ("/v1/messages", {"tools": [{"name": "add", "input_schema": {}, "strict": True}]}, "tools[0].strict"),
    ("/v1/messages", {"tool_choice": {"type": "any"}}, "tool_choice.type"),
    (
        "/v1/messages",
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        "messages[0].content[0].type",
    ),
    (
        "/v1/messages",
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "1"}]}]},
        "messages[0].content[0].tool_use_id",
    ),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure,"}]}, "messages[1]"),
    (
        "/v1/messages",
        {
            "messages": [
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]},
                {"role": "user", "content": "hi"},
            ]
        },
        "messages[0].content[0].type",
    ),
    ("/v1/messages", {"messages": [{"role": "system", "content": "hi"}]}, "messages[0].role"),
    ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "mystery"}]}]}, "messages[0].content[0].type"),
    ("/v1/messages", {"max_tokens": None}, "max_tokens"),
    ("/v1/messages", {"container": "c_1"}, "container"),
    # Mixed APIs in one conversation: the other API's items are unknown here.
    (
        "/v1/responses",
        {"input": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "1"}]}]},
        "input[0].content[0]",
    ),
    (
        "/v1/messages",
        {"messages": [{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "x", "output": "1"}]},
        "messages[1].role",
    ),
    ("/v1/messages", {"messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}]}, "messages[0].role"),
]


@pytest.mark.parametrize("path,change,field", UNSERVED, ids=[f"{p.split('/')[-1]}:{f}" for p, _, f in UNSERVED])
def test_what_is_not_served_is_a_400_naming_the_field(server, path, change, field):
    body = (
        {"model": "builtin:tiny", "max_output_tokens": 4, "input": "hi"}
        if path == "/v1/responses"
        else {"model": "builtin:tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    )
    body = {key: value for key, value in {**body, **change}.items() if value is not None}
    with server.client() as c:
        r = c.post(path, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and field.split(".")[0].split("[")[0] in error["message"], error
    if path == "/v1/messages":
        assert r.json()["type"] == "error"  # Anthropic's shape around the same error object


def test_anthropics_x_api_key_header_carries_the_token(server):
    import httpx

    body = {"model": "builtin:tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.post("/v1/messages", json=body, headers={"x-api-key": server.token}).status_code == 200
        assert c.post("/v1/messages", json=body, headers={"x-api-key": "wrong"}).status_code == 401
        assert c.post("/v1/messages", json=body).status_code == 401
