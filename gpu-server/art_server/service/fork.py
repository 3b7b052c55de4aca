"""Forking a checkpoint (ART's `_experimental_fork_checkpoint`): a registered model takes over another
model's checkpoint, the latest at or before a step, to branch a run (another reward, another
learning rate) or to carry on a good step of an old run under a new name.

The fork copies the adapter and its optimizer state: with the same settings, the fork's next step
is the step the parent would have taken (Adam's moments are part of where training stands; a fork
that wants a fresh start can say so with its learning rate, not by losing them). The parent is only
read. Its history up to that step comes along, so the fork's chart starts where the parent's was."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..store import checkpoints as ckpt
from ..store.fork import build_fork
from ..store.layout import ModelPaths
from .optimizer_phase import recorded_phase
from .trainable import RegistrationError, TrainableModel, make_optimizer, read_meta
from .training import TrainingService


class ParentNotFound(LookupError):
    """The model to fork from is not in the server's data dir (404)."""


class ForkConflict(RegistrationError):
    """A fork the models' states do not allow: another base model or LoRA config, a model that has
    trained (without overwrite), requests running on it (409)."""


async def fork_checkpoint(
    service: TrainingService, name: str, from_model: str, from_project: str | None, not_after_step: int | None, overwrite: bool
) -> dict[str, Any]:
    """Forks into the registered model `name`; returns its info."""
    model = service.get(name)  # KeyError: not registered
    project = from_project or model.project
    if (project, from_model) == (model.project, model.name):
        raise ValueError(f"model {project}/{name} cannot be forked from itself: name another model in from_model")
    parent_paths = ModelPaths.of(service.manager.config.data_dir, project, from_model)
    registered = service.models.get(from_model)
    parent = registered if registered is not None and registered.project == project else None
    # The parent's lock too, so none of its steps or checkpoint deletions runs while it is copied;
    # always taken in the same order, so two forks in opposite directions cannot deadlock.
    involved: list[TrainableModel] = [model] if parent is None else [model, parent]
    locked = sorted(involved, key=lambda m: (m.project, m.name))
    async with contextlib.AsyncExitStack() as stack:
        for m in locked:
            await stack.enter_async_context(m.lock)
            await service.idle(m)
        step = await asyncio.to_thread(_check, model, parent_paths, project, from_model, not_after_step, overwrite)
        running = service.manager.requests_running(name)
        if running:
            raise ForkConflict(
                f"{running} request(s) are being served by {name}'s adapters; a fork replaces them: retry when they have ended"
            )
        origin = {"project": project, "name": from_model, "step": step}
        model.gate.clear()  # requests for the bare name wait for the fork, as they wait for a step
        await service.reports.suspend(model)  # the history they follow is replaced: new tracker runs
        try:
            await asyncio.to_thread(build_fork, model.paths, parent_paths, step, origin)
            await _take_over(service, model, step, origin)
        finally:
            model.gate.set()
            service.reports.restart(model)
        return model.info()  # forked_from included


def _check(
    model: TrainableModel, parent: ModelPaths, project: str, from_model: str, not_after_step: int | None, overwrite: bool
) -> int:
    """The parent's step to fork (blocking: reads the disk), or the error that says why not."""
    meta = read_meta(parent)
    if meta is None:
        raise ParentNotFound(
            f"there is no model {project}/{from_model} in this server's data dir; fork from a model this server "
            "(or one started with the same --data-dir) has trained"
        )
    if meta["base_model"] != model.base_model:
        raise ForkConflict(
            f"{project}/{from_model} was trained on base model {meta['base_model']!r} and {model.project}/{model.name} "
            f"is registered on {model.base_model!r}: a fork needs the same base model"
        )
    if meta["lora"] != model.lora.model_dump():
        raise ForkConflict(
            f"{project}/{from_model} has LoRA config {meta['lora']} and {model.project}/{model.name} "
            f"{model.lora.model_dump()}: register the fork with the parent's LoRA config"
        )
    steps = ckpt.complete_steps(parent)
    eligible = [s for s in steps if not_after_step is None or s <= not_after_step]
    if not eligible:
        raise ckpt.CheckpointNotFound(
            f"{project}/{from_model} has no checkpoint at or before step {not_after_step} (its steps: "
            f"{', '.join(map(str, steps[:10]))}{' and later' if len(steps) > 10 else ''})"
        )
    trained = [s for s in ckpt.complete_steps(model.paths) if s > 0]
    if trained and not overwrite:
        raise ForkConflict(
            f"{model.project}/{model.name} has trained already (checkpoints up to step {trained[-1]}); a fork replaces "
            "its checkpoints and history: send overwrite: true to do that, or fork into a newly registered model"
        )
    return eligible[-1]


async def _take_over(service: TrainingService, model: TrainableModel, step: int, origin: dict[str, Any]) -> None:
    """The committed fork becomes the model in memory: its adapter in the training slot, its
    optimizer state, its step served as `name@step` (the model's earlier steps no longer are)."""
    folder = model.paths.checkpoint(step)

    def load() -> None:
        service.lora.load_weights(model.slot, ckpt.load_weights(folder))
        optimizer = make_optimizer(service.lora, model.slot)
        state = ckpt.load_optimizer_state(folder)
        if state is not None:
            optimizer.load_state_dict(state)
        model.optimizer = optimizer
        # The moments came from the parent's step of this kind: the next step of the other kind resets them.
        model.optimizer_phase = recorded_phase(ckpt.load_state(folder))

    await asyncio.to_thread(load)
    service.drop_reference(model)
    for served in sorted(service.manager.adapters.get(model.name, {})):
        await service.manager.remove_adapter(model.name, served)
    model.step = step
    model.forked_from = origin
    await service.serve_step(model, step)
