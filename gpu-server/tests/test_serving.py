"""The serving API of the real server process, over HTTP, on builtin:tiny.

Over 400 lines: the serving API's tests share one server; split, each file would start its own.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from adapters import train_fixed_answer_adapter
from conftest import ServerProcess, start_server

PROMPT = [{"role": "user", "content": "Name an empty cell."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_ANSWER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def chat(client: httpx.Client, **body) -> dict:
    body.setdefault("model", "builtin:tiny")
    body.setdefault("messages", PROMPT)
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, f"{response.status_code}: {response.text}"
    error = response.json()["error"]
    assert error["message"] and error["type"] and "code" in error
    return error


@pytest.fixture(scope="module")
def adapters(server, tiny_path: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    made = {
        "agent@1": train_fixed_answer_adapter(tiny_path, root / "alpha", PROMPT, "alpha alpha"),
        "agent@2": train_fixed_answer_adapter(tiny_path, root / "beta", PROMPT, "beta beta"),
        "tools@1": train_fixed_answer_adapter(tiny_path, root / "tools", TOOL_PROMPT, TOOL_ANSWER, tools=TOOLS, steps=120),
    }
    with server.client() as c:
        for name, path in made.items():
            r = c.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)})
            assert r.status_code == 200, r.text
    return made


# -- health, auth, models ------------------------------------------------------------------------


def test_health_needs_no_token(server):
    r = httpx.get(f"{server.url}/health")
    assert r.status_code == 200 and r.json()["engine"] == "hf" and r.json()["base_model"] == "builtin:tiny"


def test_missing_or_wrong_token_is_401(server):
    for token in ("", "wrong"):
        with server.client(token=token) as c:
            error = error_of(c.get("/v1/models"), 401)
            assert error["code"] == "invalid_api_key"
            error_of(c.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT}), 401)


def test_models_lists_base_and_each_adapter_step_and_bare_name(client, adapters):
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert ids[0] == "builtin:tiny"
    assert {"agent@1", "agent@2", "agent", "tools@1", "tools"} <= set(ids)


# -- sampling parameters -----------------------------------------------------------------------


def test_every_response_carries_prompt_and_completion_token_ids_with_logprobs(client):
    r = chat(client, max_tokens=6)
    assert r["prompt_token_ids"] and all(isinstance(t, int) for t in r["prompt_token_ids"])
    choice = r["choices"][0]
    assert 1 <= len(choice["token_ids"]) <= 6
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert r["usage"]["completion_tokens"] == len(choice["token_ids"])
    assert r["usage"]["prompt_tokens"] == len(r["prompt_token_ids"])


def test_n_returns_independent_choices(client):
    r = chat(client, n=5, max_tokens=8, seed=3)
    assert [c["index"] for c in r["choices"]] == list(range(5))
    assert len({tuple(c["token_ids"]) for c in r["choices"]}) > 1


def test_seed_makes_sampling_repeatable(client):
    a, b = chat(client, n=3, max_tokens=8, seed=11), chat(client, n=3, max_tokens=8, seed=11)
    c = chat(client, n=3, max_tokens=8, seed=12)
    assert [x["token_ids"] for x in a["choices"]] == [x["token_ids"] for x in b["choices"]]
    assert [x["token_ids"] for x in a["choices"]] != [x["token_ids"] for x in c["choices"]]


def test_temperature_zero_is_greedy_and_tiny_top_p_matches_it(client):
    greedy = [chat(client, temperature=0, max_tokens=8)["choices"][0]["token_ids"] for _ in range(2)]
    assert greedy[0] == greedy[1]
    nucleus = chat(client, top_p=1e-6, max_tokens=8, seed=5)["choices"][0]
    assert nucleus["token_ids"] == greedy[0]
    # Under top_p -> 0 only the top token remains: the sampled distribution gives it probability 1.
    assert all(abs(e["logprob"]) < 1e-6 for e in nucleus["logprobs"]["content"])


def test_top_k_one_matches_greedy(client):
    greedy = chat(client, temperature=0, max_tokens=8)["choices"][0]["token_ids"]
    assert chat(client, top_k=1, max_tokens=8, seed=1)["choices"][0]["token_ids"] == greedy


def test_max_tokens_and_max_completion_tokens_end_with_length(client):
    for key in ("max_tokens", "max_completion_tokens"):
        choice = chat(client, **{key: 3}, seed=2)["choices"][0]
        if choice["finish_reason"] == "length":
            assert len(choice["token_ids"]) == 3
        else:
            assert len(choice["token_ids"]) <= 3


def test_stop_string_truncates_content_and_finishes_with_stop(client):
    full = chat(client, max_tokens=12, seed=4)["choices"][0]["message"]["content"]
    assert len(full) > 4
    stop = full[2:4]
    choice = chat(client, max_tokens=12, seed=4, stop=[stop])["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert stop not in choice["message"]["content"]
    assert full.startswith(choice["message"]["content"])


def test_top_logprobs_are_sorted_and_include_the_greedy_token(client):
    choice = chat(client, temperature=0, max_tokens=5, logprobs=True, top_logprobs=3)["choices"][0]
    for entry in choice["logprobs"]["content"]:
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert math.isclose(entry["logprob"], tops[0], abs_tol=1e-6)
        assert isinstance(entry["bytes"], list)


def _forward_logprobs(
    tiny_path: Path, prompt: list[int], completion: list[int], temperature: float, adapter: Path | None = None
) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1).tolist()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_returned_logprobs_equal_a_separate_forward_pass(client, tiny_path, temperature):
    r = chat(client, n=4, max_tokens=10, seed=21, temperature=temperature)
    for choice in r["choices"]:
        expected = _forward_logprobs(tiny_path, r["prompt_token_ids"], choice["token_ids"], temperature)
        got = [e["logprob"] for e in choice["logprobs"]["content"]]
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4


def test_adapter_logprobs_equal_a_separate_forward_pass(client, tiny_path, adapters):
    r = chat(client, model="agent@1", n=2, max_tokens=6, seed=1)
    for choice in r["choices"]:
        expected = _forward_logprobs(tiny_path, r["prompt_token_ids"], choice["token_ids"], 1.0, adapters["agent@1"])
        got = [e["logprob"] for e in choice["logprobs"]["content"]]
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4


# -- adapters side by side -----------------------------------------------------------------------


def test_two_adapter_steps_served_side_by_side_give_their_own_outputs(server, adapters):
    with server.client() as c, ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(chat, c, model=m, temperature=0, max_tokens=8) for m in ["agent@1", "agent@2", "builtin:tiny"] * 4]
        texts = [f.result()["choices"][0]["message"]["content"] for f in futures]
    assert set(texts[0::3]) == {"alpha alpha"}
    assert set(texts[1::3]) == {"beta beta"}
    assert texts[2] not in ("alpha alpha", "beta beta")


def test_bare_name_serves_the_latest_step(client, adapters):
    assert chat(client, model="agent", temperature=0, max_tokens=8)["choices"][0]["message"]["content"] == "beta beta"


def test_unknown_step_and_unknown_model_are_404(client, adapters):
    assert (
        error_of(client.post("/v1/chat/completions", json={"model": "agent@99", "messages": PROMPT}), 404)["code"]
        == "model_not_found"
    )
    assert "step" in error_of(client.post("/v1/chat/completions", json={"model": "agent@99", "messages": PROMPT}), 404)["message"]
    error_of(client.post("/v1/chat/completions", json={"model": "ghost", "messages": PROMPT}), 404)


# -- tool calls ----------------------------------------------------------------------------------


def test_tool_calls_are_parsed_from_hermes_output(client, adapters):
    r = chat(client, model="tools@1", messages=TOOL_PROMPT, tools=TOOLS, temperature=0, max_tokens=40)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert call["id"].startswith("call_")
    assert choice["message"]["content"] is None


def test_tool_choice_none_leaves_the_text_alone(client, adapters):
    r = chat(client, model="tools@1", messages=TOOL_PROMPT, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=40)
    assert r["choices"][0]["finish_reason"] == "stop"
    assert "<tool_call>" in r["choices"][0]["message"]["content"]


def test_tool_messages_and_assistant_tool_calls_are_accepted_as_context(client):
    messages = TOOL_PROMPT + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    r = chat(client, messages=messages, tools=TOOLS, max_tokens=4)
    assert r["choices"][0]["token_ids"]


# -- streaming -----------------------------------------------------------------------------------


def stream_events(client: httpx.Client, **body) -> list:
    body.setdefault("model", "builtin:tiny")
    body.setdefault("messages", PROMPT)
    events = []
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return events


def test_stream_matches_the_non_streamed_completion_and_ends_with_done(client):
    full = chat(client, max_tokens=10, seed=8)
    events = stream_events(client, max_tokens=10, seed=8, stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["prompt_token_ids"] == full["prompt_token_ids"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ids = [t for c in chunks if c["choices"] for t in c["choices"][0].get("token_ids", [])]
    assert text == full["choices"][0]["message"]["content"]
    assert ids == full["choices"][0]["token_ids"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == full["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"]["completion_tokens"] == len(ids)


def test_stream_with_tools_delivers_tool_calls_in_the_final_delta(client, adapters):
    events = stream_events(client, model="tools@1", messages=TOOL_PROMPT, tools=TOOLS, temperature=0, max_tokens=40)
    chunks = [e for e in events[:-1] if e["choices"]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    calls = chunks[-1]["choices"][0]["delta"]["tool_calls"]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["index"] == 0
    assert "<tool_call>" not in "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)


def test_stream_errors_before_the_first_token_get_a_status(client):
    r = client.post("/v1/chat/completions", json={"model": "ghost", "messages": PROMPT, "stream": True})
    error_of(r, 404)


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, param",
    [
        ({"temperature": 5}, "temperature"),
        ({"n": 0}, "n"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"top_logprobs": 2}, None),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
        ({"frequency_penalty": 0.5}, None),
        ({"n": 100000}, "n"),
    ],
)
def test_invalid_parameters_are_400_naming_the_problem(client, body, param):
    error = error_of(client.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, **body}), 400)
    if param:
        assert error["param"] == param or param in error["message"]


def test_malformed_json_is_400(client):
    r = client.post(
        "/v1/chat/completions", content=b'{"model": "builtin:tiny", "messages": [', headers={"Content-Type": "application/json"}
    )
    assert "not valid JSON" in error_of(r, 400)["message"]


@pytest.mark.parametrize(
    "content, content_type, says",
    [
        (b"", "application/json", "body is empty"),
        (b"[1, 2]", "application/json", "should be an object"),
        (
            b'{"model": "builtin:tiny", "messages": [{"role": "user", "content": "hi"}]}',
            "text/plain",
            "Content-Type: application/json",
        ),
        (b'{"model": "builtin:tiny", "messages": [{"role": "user", "content": "hi"}]}', None, "Content-Type: application/json"),
    ],
)
def test_a_body_that_is_not_a_json_request_is_400(client, content, content_type, says):
    headers = {"Content-Type": content_type} if content_type else {}
    assert says in error_of(client.post("/v1/chat/completions", content=content, headers=headers), 400)["message"]


def test_chat_completions_is_documented_in_the_openapi_schema(client):
    # The route is answered ahead of FastAPI (api/chat_route.py); its declaration still documents it.
    operation = client.get("/openapi.json").json()["paths"]["/v1/chat/completions"]["post"]
    assert "ChatCompletionRequest" in str(operation["requestBody"])


def test_prompt_longer_than_the_context_is_400(client):
    long = " ".join(["word"] * 3000)
    error = error_of(
        client.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": [{"role": "user", "content": long}]}), 400
    )
    assert error["code"] == "context_length_exceeded" and "2048" in error["message"]


def test_max_tokens_past_the_context_is_400(client):
    error = error_of(
        client.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 4096}), 400
    )
    assert "Lower max_tokens" in error["message"]


def test_body_over_the_limit_is_413(client):
    big = "x" * 1_200_000
    r = client.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": [{"role": "user", "content": big}]})
    assert error_of(r, 413)["code"] == "request_too_large"


def test_bad_adapter_load_requests_are_rejected(client, tmp_path):
    error_of(client.post("/v1/load_lora_adapter", json={"lora_name": "x@1", "lora_path": str(tmp_path / "nope")}), 400)
    error_of(client.post("/v1/load_lora_adapter", json={"lora_name": "x@1", "lora_path": str(tmp_path)}), 400)
    error_of(client.post("/v1/load_lora_adapter", json={"lora_name": "../evil@1", "lora_path": str(tmp_path)}), 400)
    error_of(client.post("/v1/load_lora_adapter", json={"lora_name": "nostep", "lora_path": str(tmp_path)}), 400)


# -- load and cancellation -----------------------------------------------------------------------


def wait_for_idle(client: httpx.Client, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    stats = {}
    while time.monotonic() < deadline:
        stats = client.get("/v1/engine/stats").json()
        if stats["pending"] == 0 and stats["running"] == 0:
            return stats
        time.sleep(0.05)
    raise AssertionError(f"engine still busy: {stats}")


def assert_no_traceback_since(server, logged: int) -> None:
    assert not [line for line in server.stderr_lines[logged:] if "Traceback" in line], "a disconnect is not an error"


def test_a_cancelled_stream_frees_its_slot(server, client):
    logged = len(server.stderr_lines)
    with (
        server.client() as c,
        c.stream(
            "POST", "/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 2000, "stream": True}
        ) as r,
    ):
        for line in r.iter_lines():
            if '"token_ids"' in line:
                break
    wait_for_idle(client)
    assert_no_traceback_since(server, logged)


@pytest.fixture
def fresh_server(tmp_path) -> Iterator[ServerProcess]:
    # A server nothing has trained on: on the session's, after other modules' training steps, the
    # tiny model decodes several times slower (about 40 s for this test's 8000 tokens, 3 s here).
    srv = start_server(tmp_path, "--base-model", "builtin:tiny")
    yield srv
    srv.stop()


def test_a_request_whose_client_gave_up_frees_its_slot(fresh_server):
    server = fresh_server
    with server.client() as client:
        long = {"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 2000, "n": 4, "seed": 11}
        whole = client.post("/v1/chat/completions", json=long).json()["usage"]["completion_tokens"]  # seeded: the same every time
        before = wait_for_idle(client)
        logged = len(server.stderr_lines)
        with server.client(timeout=0.3) as c, pytest.raises(httpx.TimeoutException):
            c.post("/v1/chat/completions", json=long)
        deadline = time.monotonic() + 10
        while client.get("/v1/engine/stats").json()["steps"] == before["steps"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the request has reached the engine
        generated = wait_for_idle(client, timeout=30)["tokens_generated"] - before["tokens_generated"]
        assert 0 < generated < whole / 2, f"{generated} of {whole} tokens: generation went on after the client left"
        assert_no_traceback_since(server, logged)


def test_many_concurrent_requests_all_succeed(server):
    with server.client() as c, ThreadPoolExecutor(64) as pool:
        results = list(
            pool.map(
                lambda i: (
                    c.post(
                        "/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 8, "seed": i}
                    ).status_code
                ),
                range(128),
            )
        )
    assert results == [200] * 128
