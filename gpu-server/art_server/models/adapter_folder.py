"""Checking a PEFT adapter folder before it is loaded for serving: PEFT injects an adapter's layers
into the model before it reads the weights, so a broken folder found only then would leave the
model half changed. Checked here: a readable LoRA adapter_config.json, and a complete safetensors
file whose every tensor is finite."""

from __future__ import annotations

import json
from pathlib import Path

import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


class AdapterFolderError(ValueError):
    """The folder is not a LoRA adapter this server can serve; the message says why."""


def check_adapter_folder(path: Path) -> None:
    """Raises AdapterFolderError unless `path` holds a loadable LoRA adapter (blocking: reads the weights)."""
    from safetensors import safe_open

    try:
        config_text = (path / ADAPTER_CONFIG).read_text()
    except OSError as error:
        raise AdapterFolderError(f"{path} is not a PEFT adapter folder: cannot read {ADAPTER_CONFIG} ({error.strerror or error})") from None
    try:
        config = json.loads(config_text)
    except ValueError as error:
        raise AdapterFolderError(f"{path / ADAPTER_CONFIG} is not valid JSON ({error})") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA":
        raise AdapterFolderError(f"{path / ADAPTER_CONFIG} does not describe a LoRA adapter (peft_type {config.get('peft_type') if isinstance(config, dict) else None!r})")
    if not isinstance(config.get("r"), int) or config["r"] < 1 or not config.get("target_modules"):
        raise AdapterFolderError(f"{path / ADAPTER_CONFIG} needs a positive integer r and target_modules")
    weights = path / ADAPTER_WEIGHTS
    try:
        with safe_open(str(weights), framework="pt") as f:
            for key in f.keys():
                tensor = f.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    raise AdapterFolderError(f"{weights}: tensor {key} holds NaN or infinite values")
    except AdapterFolderError:
        raise
    except Exception as error:  # missing, truncated or not safetensors at all
        raise AdapterFolderError(f"{weights} cannot be read as safetensors ({type(error).__name__}: {error})") from None
