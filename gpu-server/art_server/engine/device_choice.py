"""Which torch device and dtype an engine runs on: shared by the hf and vLLM engines, so each stays
apart from the other."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device (torch.cuda.is_available() is False)")
    return torch.device(device)


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 matrix work runs natively (elsewhere torch emulates it, slower than fp32)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def choose_dtype(requested: str, device: torch.device, model_path: str | Path) -> torch.dtype:
    """`auto`: bf16 on CUDA; on CPU the checkpoint's own dtype when it is bf16 and the CPU does bf16
    natively (SmolLM2 on 2 cores: 1.4-1.7x the tokens/s of fp32 in serving; in training 1.5x on an
    AMD Zen 4 but 0.8x on an Intel Xeon with AMX, see docs/benchmarks.md), else fp32 (the built-in models are stored in fp32, so tests stay exact)."""
    if requested != "auto":
        return getattr(torch, requested)
    if device.type == "cuda":
        return torch.bfloat16
    try:
        stored = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        stored = {}
    if (stored.get("dtype") or stored.get("torch_dtype")) == "bfloat16" and cpu_has_native_bf16():
        return torch.bfloat16
    return torch.float32
