"""vLLM's OpenAI server as a child process: how it is found and started, on which port, with which
flags and environment, whether it is still alive, and how it is restarted and stopped.

Nothing here speaks vLLM's API beyond waiting for `/health` and reading the served context length
from `/v1/models` at start; requests go through client.py.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from ...core import openmp_waiting
from ...core.config import ServerConfig
from ...core.devices import usable_cores
from ...core.faults import take_once
from ...core.process import ALL_CORES, die_with_parent
from ..base import EngineError
from .client import KEEP_ALIVE_S
from .placement import Placement

log = logging.getLogger(__name__)

PORT_ATTEMPTS = 3
PORT_TAKEN = re.compile(r"Errno 98|address already in use", re.IGNORECASE)

# The launchers, as argv prefixes that take vLLM's server flags and then `--model <dir>`: the `vllm`
# CLI of a CUDA install, or the OpenAI server module of vLLM's CPU build, whose `vllm` console
# script fails (it looks up a distribution named `vllm`; the CPU build is `vllm-cpu`).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CPU_VENV = ".venv-vllm"


def share_of_the_cores() -> int | None:
    """OMP_NUM_THREADS when it is a whole number below the cores this process may run on (it was
    given a share of the machine), else None."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and 0 < int(value) < len(usable_cores()) else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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


def unavailable(message: str) -> EngineError:
    return EngineError(message, status=503, code="engine_unavailable")


class VLLMProcess:
    """One vLLM OpenAI server serving `path` as `base_model`, supervised: a process that died is
    started again (on the next `check()`) while callers get a 503."""

    def __init__(
        self,
        config: ServerConfig,
        base_model: str,
        path: Path,
        device: str,
        placement: Placement | None,
        sleep_mode: bool,
    ):
        self.config = config
        self.base_model = base_model
        self.path = path
        self.device = device
        self.placement = placement
        self.sleep_mode = sleep_mode  # --enable-sleep-mode and the dev routes /sleep and /wake_up
        self.api_key = secrets.token_hex(16)
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.max_model_len = 0  # what vLLM serves the base model with (0: it did not say)
        self.log_tail: deque[str] = deque(maxlen=400)
        self.restarts = 0
        self._restart: asyncio.Task | None = None
        self._port_taker: socket.socket | None = None  # the vllm_port_taken fault's listener

    @property
    def log_path(self) -> Path:
        return self.config.data_dir / "logs" / "vllm.log"

    def command(self, port: int) -> list[str]:
        config = self.config
        launcher = vllm_argv(config.vllm_command)
        if launcher is None:
            raise unavailable(
                f"cannot start vLLM: {config.vllm_command!r} not found. Install it (ART_EXTRAS=vllm npm run setup: "
                "vLLM's CPU build into .venv-vllm without an NVIDIA GPU, the CUDA build with one) or use "
                "--engine hf"
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
            # vLLM's neutral sampling defaults, not the ones of the model's generation_config.json
            # (a repetition penalty there would reshape every turn behind the trainer's back).
            "--generation-config",
            "vllm",
        ]
        if self.sleep_mode:
            argv += ["--enable-sleep-mode"]
        if self.device == "cuda":
            argv += ["--gpu-memory-utilization", str(config.vllm_gpu_memory_utilization)]
        else:
            argv += ["--dtype", vllm_cpu_dtype(config.dtype, self.path)]
        placed = self.placement.extra_args if self.placement is not None else []
        return [*argv, *placed, *shlex.split(config.vllm_args)]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in openmp_waiting.applied}  # vLLM sets its own threads up
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env.setdefault("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", str(KEEP_ALIVE_S))  # longer than the client keeps one (client.py)
        if self.sleep_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # the /sleep and /wake_up routes
        if self.device != "cuda":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.vllm_cpu_kv_cache_gib))
            # vLLM's CPU build keeps a core for its API server by default, which on 2 cores halves its
            # compute; here the art server renders prompts and vLLM's front end is thin, so it gets every
            # core (measured: tokens/s at concurrency 1/8/32 from 22/109/205 to 27/142/276; docs/gpu.md).
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
            # OMP_NUM_THREADS below the cores this process may use caps vLLM too: its threads then float
            # (VLLM_CPU_OMP_THREADS_BIND=nobind) instead of pinning a team to every core, where another
            # process on one of them stalls the whole team at each barrier (npm test's two workers).
            if share_of_the_cores() is not None:
                env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        if self.placement is not None:
            env.update(self.placement.env)
        return env

    # -- start ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Starts vLLM and returns once it answers `/health`; raises a 503 EngineError quoting the
        line of its output that says why when it exits or times out first."""
        # The port is free when picked but only bound by vLLM seconds later; another process can take
        # it in between, so a start that fails on exactly that is retried on a new port.
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return await self._start_on(self._pick_port())
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

    async def _start_on(self, port: int) -> None:
        cmd = self.command(port)
        log.info("starting vLLM (its output: %s): %s", self.log_path, " ".join(shlex.quote(c) for c in cmd))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "a", buffering=1)  # noqa: SIM115, ASYNC230 (lives as long as the process; opened once at start)
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
            raise unavailable(
                f"cannot start vLLM: {cmd[0]!r} not found; ART_EXTRAS=vllm npm run setup installs it, or use --engine hf"
            ) from None

        def pump() -> None:  # vLLM's output goes to its log; a failure quotes the line that says why
            assert process.stdout is not None  # stdout=PIPE
            for line in process.stdout:
                log_file.write(line)
                tail.append(line.rstrip())

        asyncio.get_running_loop().run_in_executor(None, pump)
        url = f"http://127.0.0.1:{port}"
        try:
            models = await self._until_healthy(process, url)
        except BaseException:  # failed, timed out, or cancelled (the server closing): no vLLM left behind
            kill_group(process)
            raise
        served = next((m.get("max_model_len") for m in models.get("data", []) if m.get("id") == self.base_model), None)
        self.process, self.url, self.max_model_len = process, url, int(served or 0)
        log.info("vLLM serves %s on %s (%s)", self.base_model, url, self.device)

    async def _until_healthy(self, process: subprocess.Popen, url: str) -> dict:
        """Polls `/health` until vLLM answers; then its `/v1/models`."""
        timeout = self.config.vllm_startup_timeout_s
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=5) as probe:
            while True:
                if process.poll() is not None:
                    await asyncio.sleep(0.2)  # the last lines of its output
                    raise unavailable(
                        f"vLLM exited during startup (exit {process.returncode}): {last_error(self.log_tail)} "
                        f"(its whole output: {self.log_path})"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(f"{url}/health")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise unavailable(
                        f"vLLM did not become healthy in {timeout:.0f} s (--vllm-startup-timeout); its output: {self.log_path}"
                    )
                await asyncio.sleep(0.5)
            return (await probe.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {self.api_key}"})).json()

    # -- supervision ---------------------------------------------------------------------------
    def check(self, restarted: Callable[[], Awaitable[None]]) -> None:
        """Returns when vLLM is running. A vLLM that died is started again, then `restarted` runs
        (the engine reconnects and loads its adapters again); meanwhile this raises a 503."""
        if self.process is not None and self.process.poll() is None and self._restart is None:
            return
        if self._restart is None:
            code = self.process.returncode if self.process is not None else None
            log.error("the vLLM process exited (code %s: %s); restarting it", code, last_error(self.log_tail))
            if self.process is not None:
                kill_group(self.process)  # what it forked outlives it otherwise
            self._restart = asyncio.get_running_loop().create_task(self._restart_then(restarted))
            self._restart.add_done_callback(self._restart_done)
        raise unavailable("the vLLM process exited and is being restarted (see logs/vllm.log); retry in a minute")

    async def _restart_then(self, restarted: Callable[[], Awaitable[None]]) -> None:
        await self.start()
        await restarted()
        self.restarts += 1

    def _restart_done(self, task: asyncio.Task) -> None:
        self._restart = None
        if not task.cancelled() and task.exception() is not None:
            log.error("restarting vLLM failed: %s", task.exception())

    async def stop(self) -> None:
        if self._restart is not None:
            self._restart.cancel()
        if self._port_taker is not None:
            self._port_taker.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    await asyncio.to_thread(self.process.wait, 20)
            kill_group(self.process)


def in_vllm_child(cores: tuple[int, ...] | None) -> None:
    """In the forked child before exec: SIGTERM when this server dies (stop() ends vLLM on a normal
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
