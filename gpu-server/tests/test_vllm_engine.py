"""The vllm engine against a local stand-in that speaks vLLM's HTTP API and CLI (vllm_standin.py):
vLLM itself needs a CUDA GPU and cannot run here."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import httpx
import pytest

from adapters import train_fixed_answer_adapter
from art_server.config import ServerConfig
from art_server.engine.base import EngineError
from art_server.engine.vllm import VLLMEngine
from conftest import start_server

STANDIN = Path(__file__).parent / "vllm_standin.py"
STANDIN_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))}"
PROMPT = [{"role": "user", "content": "Name an empty cell."}]


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, tiny_path):
    data = tmp_path_factory.mktemp("vllm-data")
    log = data / "standin.jsonl"
    srv = start_server(data, "--engine", "vllm", "--vllm-command", STANDIN_COMMAND, "--base-model", "builtin:tiny",
                       env={"STANDIN_LOG": str(log)})
    srv.standin_log = log
    yield srv
    srv.stop()


def test_health_reports_the_vllm_engine(vllm_server):
    assert httpx.get(f"{vllm_server.url}/health").json()["engine"] == "vllm"


def test_completions_carry_token_ids_and_logprobs_asked_of_vllm(vllm_server):
    with vllm_server.client() as c:
        r = c.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 6, "seed": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "builtin:tiny" and body["prompt_token_ids"]
    choice = body["choices"][0]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) > 0
    sent = [x for x in calls(vllm_server.standin_log) if x["path"] == "/v1/chat/completions"]
    assert sent and all(x["body"]["return_token_ids"] is True for x in sent)


def test_streaming_passes_token_ids_through(vllm_server):
    with vllm_server.client() as c, c.stream("POST", "/v1/chat/completions", json={
            "model": "builtin:tiny", "messages": PROMPT, "max_tokens": 5, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["prompt_token_ids"]
    assert sum(len(ch["choices"][0].get("token_ids", [])) for ch in chunks if ch["choices"]) >= 1


def test_adapters_load_through_vllms_runtime_lora_api_and_serve(vllm_server, tiny_path, tmp_path):
    adapter = train_fixed_answer_adapter(tiny_path, tmp_path / "alpha", PROMPT, "alpha alpha")
    with vllm_server.client() as c:
        assert c.post("/v1/load_lora_adapter", json={"lora_name": "agent@1", "lora_path": str(adapter)}).status_code == 200
        # Loading the same name again replaces it (vLLM alone would refuse a duplicate name).
        assert c.post("/v1/load_lora_adapter", json={"lora_name": "agent@1", "lora_path": str(adapter)}).status_code == 200
        r = c.post("/v1/chat/completions", json={"model": "agent", "messages": PROMPT, "temperature": 0, "max_tokens": 8})
        assert r.json()["choices"][0]["message"]["content"] == "alpha alpha"
        assert r.json()["model"] == "agent"
        assert "agent@1" in [m["id"] for m in c.get("/v1/models").json()["data"]]
    loads = [x["body"] for x in calls(vllm_server.standin_log) if x["path"] == "/v1/load_lora_adapter"]
    assert loads[-1] == {"lora_name": "agent@1", "lora_path": str(adapter)}


def test_unknown_model_is_404_before_reaching_vllm(vllm_server):
    with vllm_server.client() as c:
        r = c.post("/v1/chat/completions", json={"model": "ghost@3", "messages": PROMPT})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_vllm_errors_come_back_as_openai_errors(vllm_server):
    with vllm_server.client() as c:
        r = c.post("/v1/chat/completions", json={"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 5000})
    assert r.status_code == 400 and "context length" in r.json()["error"]["message"]


def test_sleep_holds_requests_until_wake(tiny_path, tmp_path):
    async def scenario():
        config = ServerConfig(data_dir=tmp_path, vllm_command=STANDIN_COMMAND, vllm_startup_timeout_s=120)
        engine = await VLLMEngine.start(config, "builtin:tiny", tiny_path)
        try:
            assert VLLMEngine.command(config, "builtin:tiny", tiny_path, 1, "k")[2:4] == ["serve", str(tiny_path)]
            await engine.sleep()
            body = {"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 3}
            pending = asyncio.create_task(engine.chat_completion(body, None, "r"))
            await asyncio.sleep(0.5)
            assert not pending.done(), "a request must wait while vLLM sleeps"
            await engine.wake()
            result = await asyncio.wait_for(pending, 30)
            assert result["choices"][0]["token_ids"]
            # A dead vLLM is reported with the end of its log.
            engine.process.kill()
            engine.process.wait()
            with pytest.raises(EngineError, match="vLLM process exited"):
                await engine.chat_completion(body, None, "r2")
        finally:
            await engine.close()

    asyncio.run(scenario())


def test_a_missing_vllm_binary_is_a_clear_error(tmp_path, tiny_path):
    config = ServerConfig(data_dir=tmp_path, vllm_command="/nonexistent/vllm")
    with pytest.raises(EngineError, match="not found"):
        asyncio.run(VLLMEngine.start(config, "builtin:tiny", tiny_path))


def test_auto_engine_picks_hf_without_vllm_or_cuda():
    from art_server.engine.factory import choose_engine

    assert choose_engine("auto") == "hf"
    assert choose_engine("vllm") == "vllm"


def test_training_with_the_vllm_engine_sleeps_trains_wakes_and_loads_the_new_adapter(vllm_server):
    from rl import choice_item, sample, step

    with vllm_server.client() as c:
        r = c.post("/v1/art/models/register", json={"name": "vl", "project": "tests", "base_model": "builtin:tiny"})
        assert r.status_code == 200, r.text
        out = sample(c, "vl", PROMPT, 4, 6, seed=3)
        group = [{"messages_and_choices": [*PROMPT, choice_item(out, ch)], "reward": float(i % 2)}
                 for i, ch in enumerate(out["choices"])]
        lines = step(c, "vl", [group], learning_rate=1e-2)
        assert lines[-1]["step"] == 1
        m = lines[-1]["metrics"]
        assert m["sleep_s"] >= 0 and m["wake_s"] >= 0 and m["tokens_trained"] > 0
        assert c.post("/v1/chat/completions", json={"model": "vl", "messages": PROMPT, "max_tokens": 3}).status_code == 200
    paths = [x["path"] for x in calls(vllm_server.standin_log)]
    sleep_at = paths.index("/sleep")
    assert paths[sleep_at + 1] == "/wake_up"
    loads = [x["body"]["lora_name"] for x in calls(vllm_server.standin_log) if x["path"] == "/v1/load_lora_adapter"]
    assert loads[-1] == "vl@1" and paths.index("/wake_up") < len(paths) - 1


def test_the_api_key_reaches_vllm_as_one_argument_even_when_it_starts_with_a_dash(tmp_path):
    config = ServerConfig(data_dir=tmp_path)
    cmd = VLLMEngine.command(config, "builtin:tiny", tmp_path, 8000, "-starts-with-a-dash")
    assert "--api-key=-starts-with-a-dash" in cmd
