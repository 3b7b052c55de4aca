"""The vllm engine's CUDA-only part, sleep mode around training, against a local stand-in that speaks
vLLM's HTTP API and CLI (vllm_standin.py): vLLM's CPU build has no sleep mode. Everything else runs
against the real vLLM in test_vllm_real.py. Also how the engine finds and starts vLLM.

"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest

from art_server.core import openmp_waiting
from art_server.core.config import ServerConfig
from art_server.core.devices import usable_cores
from art_server.engine.base import EngineError
from art_server.engine.vllm.engine import VLLMEngine
from art_server.engine.vllm.process import vllm_argv

from conftest import configuration_error, start_server

STANDIN = Path(__file__).parent / "vllm_standin.py"
STANDIN_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(STANDIN))}"
PROMPT = [{"role": "user", "content": "Name an empty cell."}]


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, tiny_path):
    data = tmp_path_factory.mktemp("vllm-data")
    log = data / "standin.jsonl"
    srv = start_server(
        data,
        "--engine",
        "vllm",
        "--vllm-command",
        STANDIN_COMMAND,
        "--vllm-sleep-mode",
        "on",
        "--base-model",
        "builtin:tiny",
        env={"STANDIN_LOG": str(log)},
    )
    srv.standin_log = log  # pyright: ignore[reportAttributeAccessIssue]  (this module's own field)
    yield srv
    srv.stop()


def test_sleep_holds_requests_until_wake(tiny_path, tmp_path):
    async def scenario():
        config = ServerConfig(data_dir=tmp_path, vllm_command=STANDIN_COMMAND, vllm_startup_timeout_s=120, vllm_sleep_mode="on")
        engine = await VLLMEngine.start(config, "builtin:tiny", tiny_path)
        try:
            await engine.sleep()
            body = {"model": "builtin:tiny", "messages": PROMPT, "max_tokens": 3}
            pending = asyncio.create_task(engine.chat_completion(body, None, "r"))
            await asyncio.sleep(0.5)
            assert not pending.done(), "a request must wait while vLLM sleeps"
            await engine.wake()
            result = await asyncio.wait_for(pending, 30)
            assert result["choices"][0]["token_ids"]
            # Streamed: the role chunk, then the sampled tokens one by one, then the finish.
            chunks = [c async for c in engine.chat_completion_stream({**body, "seed": 1}, None, "s")]
            deltas = [c["choices"][0] for c in chunks if c.get("choices")]
            assert deltas[0]["delta"]["role"] == "assistant"
            assert sum(len(d.get("token_ids") or []) for d in deltas) == 3 and deltas[-1]["finish_reason"] == "length"
            with pytest.raises(EngineError, match="not loaded"):
                await engine.chat_completion(body, "nope@1", "r1")
            # A dead vLLM is a 503 while it is started again.
            engine.vllm.process.kill()
            engine.vllm.process.wait()
            with pytest.raises(EngineError, match="vLLM process exited and is being restarted"):
                await engine.chat_completion(body, None, "r2")
            for _ in range(240):  # ... and then serves again, on its new port
                await asyncio.sleep(0.5)
                if engine.stats()["restarts"] == 1:
                    break
            assert engine.stats()["restarts"] == 1
            assert (await engine.chat_completion(body, None, "r3"))["choices"][0]["token_ids"]
        finally:
            await engine.close()

    asyncio.run(scenario())


def test_a_missing_vllm_binary_is_a_clear_error(tmp_path, tiny_path):
    config = ServerConfig(data_dir=tmp_path, vllm_command="/nonexistent/vllm")
    with pytest.raises(EngineError, match="not found"):
        asyncio.run(VLLMEngine.start(config, "builtin:tiny", tiny_path))


@pytest.mark.fast
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
        group = [
            {"messages_and_choices": [*PROMPT, choice_item(out, ch)], "reward": float(i % 2)}
            for i, ch in enumerate(out["choices"])
        ]
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


@pytest.mark.fast
def test_the_api_key_reaches_vllm_as_one_argument_even_when_it_starts_with_a_dash(tmp_path):
    engine = VLLMEngine(ServerConfig(data_dir=tmp_path, vllm_command=STANDIN_COMMAND), "builtin:tiny", tmp_path, "cpu", None)
    engine.vllm.api_key = "-starts-with-a-dash"
    assert "--api-key=-starts-with-a-dash" in engine.vllm.command(8000)


@pytest.mark.fast
def test_cuda_gets_sleep_mode_and_a_memory_share_a_cpu_gets_a_dtype_kv_cache_space_and_every_core(
    tmp_path, tiny_path, monkeypatch
):
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    config = ServerConfig(data_dir=tmp_path, vllm_command=STANDIN_COMMAND)
    cuda = VLLMEngine(config, "builtin:tiny", tiny_path, "cuda", None)
    cpu = VLLMEngine(config, "builtin:tiny", tiny_path, "cpu", None)
    assert cuda.sleeps_for_training and not cpu.sleeps_for_training
    assert "--enable-sleep-mode" in cuda.vllm.command(1) and "--gpu-memory-utilization" in cuda.vllm.command(1)
    assert (
        "--enable-sleep-mode" not in cpu.vllm.command(1)
        and cpu.vllm.command(1)[cpu.vllm.command(1).index("--dtype") + 1] == "float32"
    )
    assert cuda.vllm.environment()["VLLM_SERVER_DEV_MODE"] == "1" and cpu.vllm.environment()["VLLM_CPU_KVCACHE_SPACE"] == "2"
    # The server's own OpenMP waiting settings stay in its process (core/openmp_waiting.py); a user's would pass.
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setattr(openmp_waiting, "applied", {"OMP_WAIT_POLICY": "ACTIVE"})
    assert "OMP_WAIT_POLICY" not in cpu.vllm.environment()
    monkeypatch.setattr(openmp_waiting, "applied", {})
    assert cpu.vllm.environment()["OMP_WAIT_POLICY"] == "ACTIVE"
    assert cpu.vllm.command(1)[cpu.vllm.command(1).index("--model") + 1] == str(tiny_path)
    assert (
        cpu.vllm.environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
        and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in cuda.vllm.environment()
    )
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")  # a user's own setting wins
    assert cpu.vllm.environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    # A share of the cores (npm test's workers: OMP_NUM_THREADS=1 each) caps vLLM's threads too, unpinned.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in cpu.vllm.environment()
    if len(usable_cores()) > 1:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert cpu.vllm.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
        assert cpu.vllm.environment()["OMP_NUM_THREADS"] == "1"


@pytest.mark.fast
def test_the_launcher_is_the_vllm_cli_or_the_cpu_builds_module(monkeypatch, tmp_path):
    from art_server.engine.vllm import process as vllm

    assert vllm_argv(STANDIN_COMMAND)[-1] == "serve"  # a program gets vLLM's `serve` subcommand
    assert vllm_argv(f"{sys.executable} -m vllm.entrypoints.openai.api_server")[1:] == [
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]
    assert vllm_argv("/nonexistent/vllm") is None
    monkeypatch.setattr(vllm.shutil, "which", lambda *a, **k: None)  # no vllm CLI anywhere
    monkeypatch.setattr(vllm, "cpu_venv_python", lambda: tmp_path / "python")
    assert vllm_argv("auto") == [str(tmp_path / "python"), "-m", "vllm.entrypoints.openai.api_server"]
    monkeypatch.setattr(vllm, "cpu_venv_python", lambda: None)
    assert vllm_argv("auto") is None


def test_a_vllm_that_cannot_start_is_one_configuration_line_and_exit_78(tmp_path):
    # A launcher whose Python has no vLLM (a broken .venv-vllm): vLLM's own error, quoted in one line.
    broken = f"{shlex.quote(sys.executable)} -m vllm.entrypoints.openai.api_server"
    line = configuration_error(tmp_path, "--engine", "vllm", "--vllm-command", broken, "--base-model", "builtin:tiny")
    assert line.startswith("art-server: configuration error: the vllm engine could not start: vLLM exited during startup")
    assert "No module named 'vllm'" in line and "vllm.log" in line
