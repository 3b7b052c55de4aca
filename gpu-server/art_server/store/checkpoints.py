"""Checkpoints: one folder per step, written atomically. A folder counts as a checkpoint only once
it holds `state.json`, which is written last inside a temporary folder that is then renamed into
place; leftovers of a crash (`.tmp-*`) are removed on the next start."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from .atomic import fsync_tree, publish_dir, write_json, write_jsonl
from .layout import ModelPaths

ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTIMIZER = "optimizer.pt"
STATE = "state.json"
TRAJECTORIES = "trajectories.jsonl"  # the trajectories a step trained on, committed with it


class CheckpointNotFound(LookupError):
    """A request names a step the model has no checkpoint of (a 404: the model's state, not the body)."""


def complete_steps(paths: ModelPaths) -> list[int]:
    if not paths.checkpoints.exists():
        return []
    steps = []
    for child in paths.checkpoints.iterdir():
        if child.is_dir() and child.name.isdigit() and (child / STATE).exists():
            steps.append(int(child.name))
    return sorted(steps)


def remove_partial(paths: ModelPaths) -> list[str]:
    """Deletes what a crash left behind: temporary folders, and step folders without state.json."""
    removed = []
    if paths.checkpoints.exists():
        for child in paths.checkpoints.iterdir():
            if child.name.startswith(".tmp-") or (child.is_dir() and child.name.isdigit() and not (child / STATE).exists()):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
    return removed


def save_checkpoint(
    paths: ModelPaths,
    step: int,
    adapter_config: Any,
    weights: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any] | None,
    state: dict[str, Any],
    trajectories: list[Any] | None = None,
    before_publish: Callable[[], None] | None = None,
) -> Path:
    """Writes a standard PEFT adapter folder (adapter_config.json + adapter_model.safetensors), the
    optimizer state, the trajectories trained on, and state.json last, then renames it into place.
    The rename is the commit: `before_publish` may still refuse it (a cancelled step raises there),
    and then nothing of the folder is left."""
    paths.checkpoints.mkdir(parents=True, exist_ok=True)
    # A folder of its own per writer: two writers of one step never share a temporary folder.
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{step:04d}-", dir=paths.checkpoints))
    try:
        adapter_config.save_pretrained(str(tmp))
        save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(tmp / ADAPTER_WEIGHTS))
        if optimizer_state is not None:
            torch.save(optimizer_state, tmp / OPTIMIZER)
        if trajectories is not None:
            write_jsonl(tmp / TRAJECTORIES, trajectories)
        write_json(tmp / STATE, {"step": step, **state})
        fsync_tree(tmp)
        if before_publish is not None:
            before_publish()
        target = paths.checkpoint(step)
        publish_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_state(path: Path) -> dict[str, Any]:
    import json

    return json.loads((path / STATE).read_text())


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / ADAPTER_WEIGHTS))


def load_optimizer_state(path: Path) -> dict[str, Any] | None:
    file = path / OPTIMIZER
    return torch.load(file, weights_only=False) if file.exists() else None


def delete_steps(paths: ModelPaths, steps: list[int]) -> None:
    for step in steps:
        shutil.rmtree(paths.checkpoint(step), ignore_errors=True)
