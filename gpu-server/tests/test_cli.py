"""The command line: flags, the ready line on stdout, logs on stderr, and start-up errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import pytest

from art_server.core.config import ServerConfig, parse_args
from art_server.models.resolve import resolve_base_model
from art_server.service.manager import BaseModelConflict, ModelManager, ModelNotFound

from conftest import start_server


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "art_server", *args], capture_output=True, text=True, timeout=timeout)


def test_binding_a_non_loopback_address_requires_a_token():
    result = run_cli("--host", "0.0.0.0")
    assert result.returncode == 78  # the configuration exit code (preflight.py)
    assert "--token" in result.stderr and "non-loopback" in result.stderr


def test_flags_for_vllm_given_as_a_separate_value_say_to_use_an_equals_sign():
    result = run_cli("--vllm-args", "--enforce-eager")  # one word starting with "-": argparse takes it for a flag
    assert result.returncode == 78 and result.stderr.count("\n") == 1, result.stderr
    assert "--vllm-args='--max-num-seqs 16'" in result.stderr
    assert parse_args(["--vllm-args=--max-num-seqs 16"]).vllm_args == "--max-num-seqs 16"


@pytest.mark.fast
def test_loopback_generates_a_token_and_env_vars_match_flags(monkeypatch):
    config = parse_args([])
    assert config.host == "127.0.0.1" and len(config.token) >= 24
    monkeypatch.setenv("ART_SERVER_TOKEN", "from-env")
    monkeypatch.setenv("ART_ENGINE", "hf")
    monkeypatch.setenv("ART_DATA_DIR", "/tmp/somewhere")
    config = parse_args([])
    assert (config.token, config.engine, str(config.data_dir)) == ("from-env", "hf", "/tmp/somewhere")


@pytest.mark.fast
def test_the_hours_price_is_a_finite_amount_of_dollars(monkeypatch, capsys):
    assert parse_args([]).gpu_cost_per_hour_usd == 0  # not priced
    assert parse_args(["--gpu-cost-per-hour-usd", "2.5"]).gpu_cost_per_hour_usd == 2.5
    monkeypatch.setenv("ART_GPU_COST_PER_HOUR_USD", "3")
    assert parse_args([]).gpu_cost_per_hour_usd == 3
    monkeypatch.setenv("ART_GPU_COST_PER_HOUR_USD", "-3")  # from the environment too: the same one-line error
    with pytest.raises(SystemExit) as exited:
        parse_args([])
    assert exited.value.code == 78 and "US dollars per hour" in capsys.readouterr().err
    monkeypatch.delenv("ART_GPU_COST_PER_HOUR_USD")
    for bad in ("-1", "nan", "inf", "two dollars"):
        with pytest.raises(SystemExit) as exited:
            parse_args(["--gpu-cost-per-hour-usd", bad])
        assert exited.value.code == 78
        assert "US dollars per hour" in capsys.readouterr().err


def test_ready_line_is_the_only_stdout_and_the_token_guards_the_api(tmp_path):
    srv = start_server(tmp_path, "--token", "secret-token")
    try:
        assert srv.url.startswith("http://127.0.0.1:") and srv.token == "secret-token"
        assert httpx.get(f"{srv.url}/v1/models", headers={"Authorization": "Bearer secret-token"}).json()["data"] == []
        # No base model yet: serving says how to get one.
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            headers={"Authorization": "Bearer secret-token"},
            json={"model": "builtin:tiny", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 404 and "--base-model" in r.json()["error"]["message"]
    finally:
        srv.stop()
    out, _ = srv.process.communicate(timeout=10)
    assert out.strip() == "", f"stdout must carry only the ready line, got {out!r}"
    assert any("Uvicorn" in line or "uvicorn" in line for line in srv.stderr_lines)


def test_asking_for_cuda_without_a_gpu_fails_at_startup_with_a_clear_message(tmp_path):
    result = run_cli("--data-dir", str(tmp_path), "--device", "cuda", "--base-model", "builtin:tiny", "--port", "0")
    assert result.returncode != 0
    assert "no CUDA device" in result.stderr


def test_an_unknown_base_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="local Hugging Face cache"):
        resolve_base_model("nobody/no-such-model", tmp_path)
    with pytest.raises(ModelNotFound, match="builtin:tiny"):
        resolve_base_model("builtin:huge", tmp_path)


def test_one_server_holds_one_base_model(tmp_path):
    async def scenario():
        manager = ModelManager(ServerConfig(data_dir=tmp_path, engine="hf", device="cpu"))
        await manager.ensure_base("builtin:tiny")
        try:
            assert await manager.ensure_base("builtin:tiny") is manager.engine
            with pytest.raises(BaseModelConflict, match="holds base model 'builtin:tiny'"):
                await manager.ensure_base("builtin:small")
        finally:
            await manager.close()

    asyncio.run(scenario())


def test_a_second_server_on_the_same_data_dir_is_refused_with_a_clear_message(tmp_path):
    srv = start_server(tmp_path)
    try:
        info = __import__("json").loads((tmp_path / "server.json").read_text())
        assert info["url"] == srv.url and info["token"] == srv.token
        assert (tmp_path / "server.json").stat().st_mode & 0o077 == 0, "the token file must be private"
        result = run_cli("--data-dir", str(tmp_path), "--port", "0")
        assert result.returncode == 3
        assert "another art-server" in result.stderr and srv.url in result.stderr
    finally:
        srv.stop()
    assert not (tmp_path / "server.json").exists()
