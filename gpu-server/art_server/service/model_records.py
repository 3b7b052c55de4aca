"""What a trained model leaves behind and how it is read back: logged groups as history rows, the
list of its checkpoints, and pruning them to the latest and the best."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ..core.names import adapter_key
from ..store import checkpoints as ckpt
from ..store.history import append_history, group_metrics, read_history, write_trajectories
from .trainable import TrainableModel


async def log_groups(
    model: TrainableModel, split: str, groups: list[list[dict[str, Any]]], step: int | None, extra: dict[str, Any] | None
) -> dict[str, Any]:
    """Stores `groups` and appends their metrics (and `extra`, e.g. what judging them cost) as a history row."""
    step = model.step if step is None else step
    await asyncio.to_thread(write_trajectories, model.paths, split, step, groups)
    return append_history(model.paths, step, split, {**group_metrics(groups), **(extra or {})})


def list_checkpoints(model: TrainableModel) -> list[dict[str, Any]]:
    out = []
    for step in ckpt.complete_steps(model.paths):
        folder = model.paths.checkpoint(step)
        state = json.loads((folder / ckpt.STATE).read_text())
        out.append(
            {
                "step": step,
                "path": str(folder),
                "kind": state.get("kind"),
                "created": state.get("created"),
                "inference_name": adapter_key(model.name, step),
            }
        )
    return out


async def delete_checkpoints(manager: Any, model: TrainableModel, keep_best_by: str) -> dict[str, Any]:
    """Deletes every checkpoint but the latest and the best by `split/metric` (higher is better);
    the caller holds the model's lock."""
    steps = ckpt.complete_steps(model.paths)
    split, _, metric = keep_best_by.partition("/")
    scored = {
        r["step"]: r[metric]
        for r in read_history(model.paths)
        if r.get("split") == split and isinstance(r.get(metric), (int, float))
    }
    best = max((s for s in scored if s in steps), key=lambda s: scored[s], default=None)
    keep = {steps[-1]} | ({best} if best is not None else set())
    doomed = [s for s in steps if s not in keep]
    for step in doomed:
        if step in manager.adapters.get(model.name, {}):
            await manager.remove_adapter(model.name, step)
    await asyncio.to_thread(ckpt.delete_steps, model.paths, doomed)
    return {
        "deleted": doomed,
        "kept": sorted(keep),
        "best_step": best,
        "metric": keep_best_by,
        "note": None if best is not None else f"no history rows with {keep_best_by}; kept only the latest",
    }
