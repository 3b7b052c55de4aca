"""Checking a PEFT adapter folder before it is loaded for serving: PEFT injects an adapter's layers
into the model before it reads the weights, so a broken folder found only then would leave the
model half changed. Checked here: a readable LoRA adapter_config.json with a finite, bounded
scaling, and a complete safetensors file whose every tensor is finite and fits the base model
(each names a module the base model has, with its input and output sizes, and one rank)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
# lora_alpha / r (or / sqrt(r) with rsLoRA): the adapter's output is scaled by it. Our own adapters
# stay under 4096 (alpha <= 4096, r >= 1); past this bound an adapter only overflows into garbage.
MAX_LORA_SCALING = 1e4


class AdapterFolderError(ValueError):
    """The folder is not a LoRA adapter this server can serve; the message says why."""


def base_weight_shapes(base_path: Path) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor in a base model folder's safetensors files, read from their headers
    (no weights loaded); empty for a model stored in another format (then only PEFT checks the fit)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(base_path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (a safetensors file: iterable only through keys())
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def check_adapter_folder(path: Path, base_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
    """Raises AdapterFolderError unless `path` holds a LoRA adapter this server can serve on a base
    model with `base_shapes` (blocking: reads the weights)."""
    from safetensors import safe_open

    config = _read_config(path)
    weights = path / ADAPTER_WEIGHTS
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with safe_open(str(weights), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (a safetensors file: iterable only through keys())
                tensor = f.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    raise AdapterFolderError(f"{weights}: tensor {key} holds NaN or infinite values")
                shapes[key] = tuple(tensor.shape)
    except AdapterFolderError:
        raise
    except Exception as error:  # missing, truncated or not safetensors at all
        raise AdapterFolderError(f"{weights} cannot be read as safetensors ({type(error).__name__}: {error})") from None
    if base_shapes:
        _check_fit(config, shapes, base_shapes, weights)


def _read_config(path: Path) -> dict:
    try:
        config_text = (path / ADAPTER_CONFIG).read_text()
    except OSError as error:
        raise AdapterFolderError(
            f"{path} is not a PEFT adapter folder: cannot read {ADAPTER_CONFIG} ({error.strerror or error})"
        ) from None
    try:
        config = json.loads(config_text)
    except ValueError as error:
        raise AdapterFolderError(f"{path / ADAPTER_CONFIG} is not valid JSON ({error})") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA":
        raise AdapterFolderError(
            f"{path / ADAPTER_CONFIG} does not describe a LoRA adapter (peft_type {config.get('peft_type') if isinstance(config, dict) else None!r})"
        )
    r = config.get("r")
    if not isinstance(r, int) or isinstance(r, bool) or r < 1 or not config.get("target_modules"):
        raise AdapterFolderError(f"{path / ADAPTER_CONFIG} needs a positive integer r and target_modules")
    alphas = [config.get("lora_alpha", 8), *(config.get("alpha_pattern") or {}).values()]
    ranks = [r, *(config.get("rank_pattern") or {}).values()]
    for alpha in alphas:
        for rank in ranks:
            scaling = _scaling(alpha, rank, bool(config.get("use_rslora")))
            if scaling is None or abs(scaling) > MAX_LORA_SCALING:
                raise AdapterFolderError(
                    f"{path / ADAPTER_CONFIG}: lora_alpha {alpha!r} with r {rank!r} scales the adapter by "
                    f"{scaling if scaling is not None else 'a non-number'}; a servable adapter's scaling is "
                    f"finite and at most {MAX_LORA_SCALING:g}"
                )
    return config


def _scaling(alpha: object, rank: object, rslora: bool) -> float | None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not isinstance(rank, int) or rank < 1:
        return None
    try:
        scaling = alpha / (math.sqrt(rank) if rslora else rank)
    except OverflowError:
        return None
    return scaling if math.isfinite(scaling) else None


def _check_fit(config: dict, shapes: dict[str, tuple[int, ...]], base: dict[str, tuple[int, ...]], weights: Path) -> None:
    """Each LoRA pair names a module of the base model and matches its sizes; the config's rank too."""
    targets = config["target_modules"]
    for key, shape in shapes.items():
        pairs = ((".lora_A.weight", ".lora_B.weight", False), (".lora_embedding_A", ".lora_embedding_B", True))
        for a, b, embedding in pairs:  # noqa: B007 (the pair found is used after the break)
            if key.endswith(a):
                break
        else:
            continue
        module = key[len(PEFT_PREFIX) : -len(a)] if key.startswith(PEFT_PREFIX) else key[: -len(a)]
        base_shape = base.get(f"{module}.weight")
        if base_shape is None:
            if module.endswith("lm_head"):  # tied to the embeddings: not stored on its own
                continue
            raise AdapterFolderError(
                f"{weights}: tensor {key} is for module {module!r}, which this base model does not have "
                "(an adapter trained on another base model?)"
            )
        if isinstance(targets, list) and not any(module == t or module.endswith(f".{t}") for t in targets):
            raise AdapterFolderError(
                f"{weights}: tensor {key} is for module {module!r}, which target_modules {targets} "
                "in adapter_config.json does not name"
            )
        other = shapes.get(key[: -len(a)] + b)
        if other is None or len(shape) != 2 or len(other) != 2 or len(base_shape) != 2:
            raise AdapterFolderError(f"{weights}: tensor {key} has no matching {b.strip('.')} of rank 2")
        rank = shape[0]
        # Linear: A [r, in], B [out, r], base [out, in]. Embedding: A [r, rows], B [dim, r], base [rows, dim].
        expected_a, expected_b = (
            ((rank, base_shape[0]), (base_shape[1], rank)) if embedding else ((rank, base_shape[1]), (base_shape[0], rank))
        )
        if shape != expected_a or other != expected_b:
            raise AdapterFolderError(
                f"{weights}: module {module!r} has LoRA shapes {list(shape)} and {list(other)}; "
                f"this base model's {list(base_shape)} weight needs {list(expected_a)} and {list(expected_b)} "
                "(an adapter trained on another base model?)"
            )
        if not config.get("rank_pattern") and rank != config["r"]:
            raise AdapterFolderError(
                f"{weights}: module {module!r} has rank {rank}, but adapter_config.json says r = {config['r']}"
            )
