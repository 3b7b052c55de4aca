"""Chooses and starts the engine for a base model (`--engine auto|hf|vllm`)."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from pathlib import Path

from ..core.config import ServerConfig
from .base import Engine

log = logging.getLogger(__name__)


def choose_engine(requested: str) -> str:
    if requested != "auto":
        return requested
    if importlib.util.find_spec("vllm") is not None:
        import torch

        if torch.cuda.is_available():
            return "vllm"
    return "hf"


async def create_engine(config: ServerConfig, base_model: str, path: Path) -> Engine:
    kind = choose_engine(config.engine)
    log.info("starting the %s engine for %s", kind, base_model)
    if kind == "vllm":
        from .vllm.engine import VLLMEngine

        return await VLLMEngine.start(config, base_model, path)
    from .hf.engine import load_hf_engine

    return await asyncio.to_thread(load_hf_engine, base_model, path, config.device, config.dtype, config.max_batch_size)
