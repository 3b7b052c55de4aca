"""Server configuration: command-line flags, each with a matching ART_* environment variable."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from .bounds import MAX_PRICE_PER_HOUR, MAX_REPORTED_TRAJECTORIES

# A configuration that cannot work ends the process with one line and this exit code (EX_CONFIG
# from sysexits.h); LocalBackend turns it into a ConfigurationError. See preflight.py.
CONFIG_EXIT_CODE = 78
CONFIG_ERROR_PREFIX = "art-server: configuration error: "
CHOICES = {
    "engine": ("auto", "hf", "vllm"),
    "device": ("auto", "cpu", "cuda"),
    "dtype": ("auto", "float32", "bfloat16", "float16"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (no usage block) and the configuration exit code."""

    def error(self, message: str):  # type: ignore[override]
        if message.startswith("argument --vllm-args: expected one argument"):  # its value starts with "-"
            message += "; write the flags for vLLM after an equals sign: --vllm-args='--max-num-seqs 16'"
        self.exit(CONFIG_EXIT_CODE, f"{CONFIG_ERROR_PREFIX}{message} (see art-server --help)\n")


MIN_REMOTE_TOKEN = 16  # characters of a token guarding a server reachable from other machines


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    token: str = ""
    data_dir: Path = field(default_factory=lambda: Path(".art"))
    base_model: str | None = None
    model_cache: Path | None = None  # converted packaged models; default <data_dir>/models
    engine: str = "auto"  # auto | hf | vllm
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"
    max_body_bytes: int = 32 * 1024 * 1024
    # The request head and the pace of a request (api/connection.py): what one client may hold.
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_batch_size: int = 256
    max_n: int = 256
    gpu_cost_per_hour_usd: float = 0.0  # what this machine's hour costs: each step's cost_usd (0: not priced)
    report: str = ""  # trackers every model reports to unless its registration says (comma list: wandb, trackio)
    report_trajectories: int = 0  # trajectories of each step sent to the trackers as a table
    log_level: str = "info"
    parent_pid: int | None = None  # exit when this process is gone (LocalBackend passes its own)
    docs: bool = False  # serve /docs, /redoc and /openapi.json (public: they describe the API, no data)
    # vllm engine
    vllm_command: str = "auto"  # the vllm CLI, else vLLM's CPU build in .venv-vllm beside this venv
    vllm_args: str = ""
    vllm_gpu_memory_utilization: float = 0.8
    vllm_max_lora_rank: int = 0  # 0: 64 on CUDA, 8 (the default LoRA rank) on a CPU, where a larger one is slow
    vllm_startup_timeout_s: float = 900.0
    vllm_sleep_mode: str = "auto"  # sleep vLLM while a step trains: auto = on CUDA (vLLM's sleep mode is CUDA-only)
    vllm_cpu_kv_cache_gib: int = 2  # VLLM_CPU_KVCACHE_SPACE for vLLM's CPU build (whole GiB)
    inference_devices: str = ""  # where vLLM runs (engine/vllm/placement.py)
    # trainer ranks (trainer/ranks.py): data-parallel training on torch.distributed
    train_ranks: int = 1
    train_local_ranks: int = 0  # ranks this server starts (0: all); the rest join from other machines
    train_devices: str = ""
    train_master_addr: str = "127.0.0.1"
    train_master_port: int = 0
    train_rendezvous_timeout_s: float = 60.0
    train_rank_timeout_s: float = 300.0
    train_threads_per_rank: int = 0  # CPU threads per rank (0: this machine's cores shared evenly)
    train_shard_base: bool = False  # FSDP2: each rank holds 1/N of the frozen base model (trainer/sharding.py)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@overload
def _env(name: str, default: str) -> str: ...
@overload
def _env(name: str, default: None) -> str | None: ...
def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(f"ART_{name}", default)


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a price: give US dollars per hour, e.g. 2.5") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_PRICE_PER_HOUR:
        raise argparse.ArgumentTypeError(f"{text} US dollars per hour: give a price from 0 to {MAX_PRICE_PER_HOUR:,}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_REPORTED_TRAJECTORIES:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from 0 to {MAX_REPORTED_TRAJECTORIES}")
    return int(text)


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    d = ServerConfig()
    p = _Parser(
        prog="art-server",
        description="OpenAI-compatible serving of a base model and its per-step LoRA adapters, with GRPO/SFT training.",
    )
    p.add_argument("--host", default=_env("HOST", d.host), help="bind address (ART_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, default=_env("PORT", str(d.port)), help="port, 0 picks a free one (ART_PORT)")
    p.add_argument(
        "--token",
        default=_env("SERVER_TOKEN", None),
        help="bearer token clients must send (ART_SERVER_TOKEN); generated on loopback when not given, "
        "required on any other address",
    )
    p.add_argument("--data-dir", default=_env("DATA_DIR", str(d.data_dir)), help="models, checkpoints, logs (ART_DATA_DIR)")
    p.add_argument(
        "--base-model",
        default=_env("BASE_MODEL", None),
        help="preload a base model: a Hugging Face id (local cache, or packaged: HuggingFaceTB/SmolLM2-135M-Instruct), "
        "builtin:tiny, builtin:small, or a folder",
    )
    p.add_argument(
        "--model-cache",
        default=_env("MODEL_CACHE", None),
        help="where packaged GGUF models are converted once (ART_MODEL_CACHE; default <data-dir>/models)",
    )
    p.add_argument(
        "--engine",
        choices=CHOICES["engine"],
        default=_env("ENGINE", d.engine),
        help="auto: vllm when installed and a CUDA device is present, else hf (ART_ENGINE)",
    )
    p.add_argument("--device", choices=CHOICES["device"], default=_env("DEVICE", d.device), help="hf engine device (ART_DEVICE)")
    p.add_argument(
        "--dtype",
        choices=CHOICES["dtype"],
        default=_env("DTYPE", d.dtype),
        help="auto: bf16 on CUDA; on CPU the checkpoint's dtype when it is bf16 and the CPU has AVX512-BF16/AMX, else "
        "float32 (ART_DTYPE); or float32, bfloat16, float16",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=_env("MAX_BODY_BYTES", str(d.max_body_bytes)),
        help="requests with a larger body get 413 (ART_MAX_BODY_BYTES)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=_env("MAX_HEADER_BYTES", str(d.max_header_bytes)),
        help="request line and headers over this many bytes get 431 (ART_MAX_HEADER_BYTES)",
    )
    p.add_argument(
        "--max-headers",
        type=int,
        default=_env("MAX_HEADERS", str(d.max_headers)),
        help="requests with more headers get 431 (ART_MAX_HEADERS)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=_env("HEADER_TIMEOUT", str(d.header_timeout_s)),
        help="seconds a client has to send a request's headers; then 408 and the connection closes (ART_HEADER_TIMEOUT)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=_env("BODY_TIMEOUT", str(d.body_timeout_s)),
        help="longest pause while a request body arrives; then 408 and the connection closes (ART_BODY_TIMEOUT)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=_env("MAX_BATCH_SIZE", str(d.max_batch_size)),
        help="hf engine: most sequences decoded together",
    )
    p.add_argument("--max-n", type=int, default=_env("MAX_N", str(d.max_n)), help="largest n per request")
    p.add_argument(
        "--gpu-cost-per-hour-usd",
        type=_price,
        default=_env("GPU_COST_PER_HOUR_USD", str(d.gpu_cost_per_hour_usd)),
        help="what an hour of this machine costs, in US dollars: each training step records cost_usd for its "
        "sampling and training time (a model's gpuCostPerHourUsd overrides it; ART_GPU_COST_PER_HOUR_USD)",
    )
    p.add_argument(
        "--report",
        default=_env("REPORT", d.report),
        help="experiment tracking: send every model's history rows to these trackers (comma list of wandb, "
        "trackio; a model's `report` option overrides it). W&B reads WANDB_API_KEY or WANDB_MODE=offline, "
        "Trackio TRACKIO_DIR (ART_REPORT)",
    )
    p.add_argument(
        "--report-trajectories",
        type=_count,
        default=_env("REPORT_TRAJECTORIES", str(d.report_trajectories)),
        help="with --report: how many trajectories of each step to send as a table (default 0; ART_REPORT_TRAJECTORIES)",
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", d.log_level))
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="stop when this process is gone (LocalBackend passes its own pid: a killed notebook kernel leaves no server behind)",
    )
    p.add_argument(
        "--vllm-command",
        default=_env("VLLM_COMMAND", d.vllm_command),
        help="how to start vLLM: auto (default) finds the vllm CLI, else vLLM's CPU build in .venv-vllm beside "
        "this server's venv (ART_EXTRAS=vllm npm run setup); a `python -m ...` command is used as given, "
        "any other program gets vLLM's `serve` subcommand",
    )
    p.add_argument("--vllm-args", default=_env("VLLM_ARGS", d.vllm_args), help="extra arguments for vllm serve")
    p.add_argument(
        "--vllm-gpu-memory-utilization",
        type=float,
        default=_env("VLLM_GPU_MEMORY_UTILIZATION", str(d.vllm_gpu_memory_utilization)),
    )
    p.add_argument(
        "--vllm-max-lora-rank",
        type=int,
        default=_env("VLLM_MAX_LORA_RANK", str(d.vllm_max_lora_rank)),
        help="largest LoRA rank vLLM serves (default 0: 64 on CUDA; 8, the default rank, on a CPU, where vLLM "
        "pads every adapter to it: 8 samples of SmolLM2-135M took 1.6 s at 8, 2.5 s at 16, 16.8 s at 64)",
    )
    p.add_argument("--vllm-startup-timeout", type=float, default=_env("VLLM_STARTUP_TIMEOUT", str(d.vllm_startup_timeout_s)))
    p.add_argument(
        "--vllm-sleep-mode",
        choices=["auto", "on", "off"],
        default=_env("VLLM_SLEEP_MODE", d.vllm_sleep_mode),
        help="put vLLM to sleep while a step trains (frees GPU memory; requests wait): auto = on with CUDA, "
        "where vLLM's sleep mode exists",
    )
    p.add_argument(
        "--vllm-cpu-kv-cache-gib",
        type=int,
        default=_env("VLLM_CPU_KV_CACHE_GIB", str(d.vllm_cpu_kv_cache_gib)),
        help="vLLM's CPU build: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE)",
    )
    p.add_argument(
        "--inference-devices",
        default=_env("INFERENCE_DEVICES", d.inference_devices),
        help="vllm engine: where vLLM runs, e.g. cuda:0,cuda:1 (one replica per GPU unless --vllm-args names "
        "parallel sizes) or cpu:0-3 (pinned cores); with --train-devices elsewhere, vLLM keeps serving "
        "while a step trains (ART_INFERENCE_DEVICES)",
    )
    p.add_argument(
        "--train-ranks",
        type=int,
        default=_env("TRAIN_RANKS", str(d.train_ranks)),
        help="trainer processes in one torch.distributed group (ART_TRAIN_RANKS; default 1): each step's sequences "
        "are split across them by token count and their LoRA gradients summed",
    )
    p.add_argument(
        "--train-local-ranks",
        type=int,
        default=_env("TRAIN_LOCAL_RANKS", str(d.train_local_ranks)),
        help="how many of the ranks this server starts (0, the default: all); ranks from this number up join from "
        "other machines (python -m art_server.trainer.rank_worker, see the README's multi-node section)",
    )
    p.add_argument(
        "--train-devices",
        default=_env("TRAIN_DEVICES", d.train_devices),
        help="one device per local rank, e.g. cuda:0,cuda:1 (default: cuda:0.. with CUDA, else cpu)",
    )
    p.add_argument(
        "--train-master-addr",
        default=_env("TRAIN_MASTER_ADDR", d.train_master_addr),
        help="address rank 0 hosts the ranks' rendezvous on (ART_TRAIN_MASTER_ADDR; default 127.0.0.1)",
    )
    p.add_argument(
        "--train-master-port",
        type=int,
        default=_env("TRAIN_MASTER_PORT", str(d.train_master_port)),
        help="its port (0: a free one; set it when ranks join from other machines)",
    )
    p.add_argument(
        "--train-rendezvous-timeout",
        type=float,
        default=_env("TRAIN_RENDEZVOUS_TIMEOUT", str(d.train_rendezvous_timeout_s)),
        help="seconds every rank has to join at start-up (and after a restart)",
    )
    p.add_argument(
        "--train-rank-timeout",
        type=float,
        default=_env("TRAIN_RANK_TIMEOUT", str(d.train_rank_timeout_s)),
        help="seconds a rank may keep the others waiting within a step before the step fails",
    )
    p.add_argument(
        "--train-threads-per-rank",
        type=int,
        default=_env("TRAIN_THREADS_PER_RANK", str(d.train_threads_per_rank)),
        help="CPU threads of each rank (0: this machine's cores shared evenly between its ranks)",
    )
    p.add_argument(
        "--train-shard-base",
        action="store_true",
        default=_env("TRAIN_SHARD_BASE", "") in ("1", "true"),
        help="shard the frozen base model across the trainer ranks (FSDP2): each holds 1/N of it, for a model "
        "that does not fit one device; the trainer then keeps its own copy apart from serving "
        "(ART_TRAIN_SHARD_BASE=1)",
    )
    p.add_argument(
        "--docs",
        action="store_true",
        default=_env("DOCS", "") in ("1", "true"),
        help="serve the API's documentation at /docs and /openapi.json (ART_DOCS=1; off by default)",
    )
    a = p.parse_args(argv)
    if not a.token:
        if not is_loopback(a.host):
            p.error(f"--token (or ART_SERVER_TOKEN) is required when binding {a.host}, a non-loopback address")
        a.token = secrets.token_urlsafe(24)
    elif not is_loopback(a.host) and len(a.token) < MIN_REMOTE_TOKEN:
        p.error(
            f"--token is {len(a.token)} characters; binding {a.host}, a non-loopback address, needs at least "
            f"{MIN_REMOTE_TOKEN} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    return ServerConfig(
        host=a.host,
        port=a.port,
        token=a.token,
        data_dir=Path(a.data_dir).resolve(),
        base_model=a.base_model,
        model_cache=Path(a.model_cache).expanduser().resolve() if a.model_cache else None,
        engine=a.engine,
        device=a.device,
        dtype=a.dtype,
        max_body_bytes=a.max_body_bytes,
        max_header_bytes=a.max_header_bytes,
        max_headers=a.max_headers,
        header_timeout_s=a.header_timeout,
        body_timeout_s=a.body_timeout,
        max_batch_size=a.max_batch_size,
        max_n=a.max_n,
        gpu_cost_per_hour_usd=a.gpu_cost_per_hour_usd,
        report=a.report,
        report_trajectories=a.report_trajectories,
        log_level=a.log_level,
        parent_pid=a.parent_pid,
        docs=a.docs,
        vllm_command=a.vllm_command,
        vllm_args=a.vllm_args,
        vllm_gpu_memory_utilization=a.vllm_gpu_memory_utilization,
        vllm_max_lora_rank=a.vllm_max_lora_rank,
        vllm_startup_timeout_s=a.vllm_startup_timeout,
        vllm_sleep_mode=a.vllm_sleep_mode,
        vllm_cpu_kv_cache_gib=a.vllm_cpu_kv_cache_gib,
        inference_devices=a.inference_devices,
        train_ranks=a.train_ranks,
        train_local_ranks=a.train_local_ranks,
        train_devices=a.train_devices,
        train_master_addr=a.train_master_addr,
        train_master_port=a.train_master_port,
        train_rendezvous_timeout_s=a.train_rendezvous_timeout,
        train_rank_timeout_s=a.train_rank_timeout,
        train_threads_per_rank=a.train_threads_per_rank,
        train_shard_base=a.train_shard_base,
    )
