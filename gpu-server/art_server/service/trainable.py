"""Trainable models: registration (new at step 0, or resumed at the latest complete checkpoint), the
LoRA slot each one trains in, its optimizer, and publishing a step (checkpoint, then serving)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..core.names import adapter_key
from ..store import checkpoints as ckpt
from ..store.atomic import write_json
from ..store.fork import finish_fork
from ..store.history import drop_history_after, restore_history_rows, restore_step_trajectories
from ..store.layout import ModelPaths
from ..trainer.lora import LoraHost, LoraSpec
from .optimizer_phase import recorded_phase

log = logging.getLogger(__name__)


class RegistrationError(ValueError):
    """A registration that conflicts with what is on disk or on this server (409)."""


class LoraConfigError(ValueError):
    """A LoRA config the base model cannot take (400)."""


@dataclass
class TrainableModel:
    name: str
    project: str
    base_model: str
    lora: LoraSpec
    paths: ModelPaths
    slot: str
    optimizer: torch.optim.Optimizer
    step: int
    # Open unless a step is training; bare-name requests wait on it (see ModelManager.resolve_wait).
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    serve_previous: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The task of the running (or last) step: one whose request ended early still rolls back or
    # completes there; the next step waits for it.
    worker: asyncio.Task | None = None
    forked_from: dict[str, Any] | None = None  # project, name and step of the checkpoint it was forked from
    # The kind of step ("sft", "grpo") that last updated the optimizer (optimizer_phase.py); None: none yet.
    optimizer_phase: str | None = None
    reporters: list[Any] = field(default_factory=list)  # report/reporter.py: one per tracker (service/reporting.py)

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "base_model": self.base_model,
            "step": self.step,
            "inference_name": adapter_key(self.name, self.step),
            "lora": self.lora.model_dump(),
            "path": str(self.paths.root),
            "training": not self.gate.is_set() or (self.worker is not None and not self.worker.done()),
            **({"forked_from": self.forked_from} if self.forked_from else {}),
            "reporters": [r.status() for r in self.reporters],
        }


def make_optimizer(host: LoraHost, slot: str) -> torch.optim.Optimizer:
    return torch.optim.AdamW(host.parameters(slot), lr=1e-5, betas=(0.9, 0.99), weight_decay=0.0)


def registration_conflict(existing: TrainableModel, project: str, base_model: str, lora: LoraSpec | None) -> str | None:
    """Why registering `existing.name` again with these values cannot resume it (None: it can)."""
    name = existing.name
    if existing.base_model != base_model:
        return (
            f"model {existing.project}/{name} is registered on this server with base model "
            f"{existing.base_model!r}, not {base_model!r}; pick another name for a model on another base model"
        )
    if existing.project != project:
        return (
            f"this server already serves a model named {name!r} in project {existing.project!r}; "
            "model names must be unique per server"
        )
    if lora is not None and vars(lora) != vars(existing.lora):
        return f"model {project}/{name} is registered with LoRA config {vars(existing.lora)}"
    return None


def register(
    host: LoraHost, data_dir: Path, name: str, project: str, base_model: str, lora: LoraSpec | None, slot: str
) -> tuple[TrainableModel, bool]:
    """Creates or resumes a model (blocking: call from a worker thread). Returns it and whether it resumed."""
    paths = ModelPaths.of(data_dir, project, name)
    if finish_fork(paths):  # a fork that committed before a crash (store/fork.py)
        log.warning("%s/%s: completed a fork that was interrupted after its commit", project, name)
    meta = read_meta(paths)
    if meta is not None:
        if meta["base_model"] != base_model:
            raise RegistrationError(
                f"model {project}/{name} was trained on {meta['base_model']!r}, not {base_model!r}; "
                "register it with its own base model, or pick a new name"
            )
        stored = LoraSpec(**meta["lora"])
        if lora is not None and lora.model_dump() != stored.model_dump():
            raise RegistrationError(
                f"model {project}/{name} exists with LoRA config {stored.model_dump()}; it cannot resume with {lora.model_dump()}"
            )
        lora = stored
    lora = lora or LoraSpec()
    # The same name and project always start from the same LoRA initialisation.
    seed = int.from_bytes(hashlib.sha256(f"{project}/{name}".encode()).digest()[:4], "little")
    try:
        host.add_slot(slot, lora.peft_config(), seed=seed)
    except ValueError as error:  # e.g. target modules the base model does not have
        host.delete_slot(slot)
        raise LoraConfigError(f"LoRA config {lora.model_dump()} does not fit base model {base_model!r}: {error}") from None
    try:
        optimizer, step, resumed = _open(host, paths, slot, name, project, base_model, lora)
    except BaseException:
        host.delete_slot(slot)  # a failed registration leaves no LoRA slot behind
        raise
    model = TrainableModel(name, project, base_model, lora, paths, slot, optimizer, step)
    model.optimizer_phase = recorded_phase(ckpt.load_state(paths.checkpoint(step))) if resumed else None
    model.forked_from = (meta or {}).get("forked_from")
    model.gate.set()
    return model, resumed


def _open(
    host: LoraHost, paths: ModelPaths, slot: str, name: str, project: str, base_model: str, lora: LoraSpec
) -> tuple[torch.optim.Optimizer, int, bool]:
    """Loads the latest complete checkpoint into `slot`, or saves step 0; returns the optimizer, the step
    and whether it resumed."""
    optimizer = make_optimizer(host, slot)
    removed = ckpt.remove_partial(paths)
    if removed:
        log.warning("%s/%s: removed unfinished checkpoint folders %s", project, name, removed)
    steps = ckpt.complete_steps(paths)
    if steps:
        step = steps[-1]
        folder = paths.checkpoint(step)
        host.load_weights(slot, ckpt.load_weights(folder))
        state = ckpt.load_optimizer_state(folder)
        if state is not None:
            optimizer.load_state_dict(state)
        dropped = drop_history_after(paths, step)
        if dropped:
            log.warning("%s/%s: dropped %d history rows of a step that did not complete", project, name, dropped)
        recovered = restore_history_rows(paths, [(s, ckpt.load_state(paths.checkpoint(s))) for s in steps])
        if recovered:
            log.warning("%s/%s: history rows of steps %s recovered from their checkpoints", project, name, recovered)
        linked = restore_step_trajectories(paths, steps)
        if linked:
            log.warning("%s/%s: trajectories of steps %s recovered from their checkpoints", project, name, linked)
        resumed = True
    else:
        # Step 0: the identity LoRA (PEFT initialises B to zero), saved like any other step.
        step = 0
        paths.logs.mkdir(parents=True, exist_ok=True)
        write_json(
            paths.model_json,
            {"name": name, "project": project, "base_model": base_model, "lora": lora.model_dump(), "created": time.time()},
        )
        ckpt.save_checkpoint(
            paths, 0, host.config(slot), host.weights(slot), optimizer.state_dict(), {"kind": "init", "created": time.time()}
        )
        resumed = False
    return optimizer, step, resumed


def save_step(
    host: LoraHost, model: TrainableModel, step: int, state: dict[str, Any], trajectories: list[Any] | None, before_publish: Any
) -> Path:
    """Writes checkpoint `step` from the slot's weights and the optimizer (blocking); the rename into
    place is the step's commit, which `before_publish` can still refuse."""
    with host.lock:
        weights = host.weights(model.slot)
        optimizer_state = model.optimizer.state_dict()
    return ckpt.save_checkpoint(
        model.paths,
        step,
        host.config(model.slot),
        weights,
        optimizer_state,
        {"created": time.time(), **state},
        trajectories,
        before_publish,
    )


def read_meta(paths: ModelPaths) -> dict[str, Any] | None:
    """A model's model.json (name, project, base model, LoRA config, where it was forked from), or None."""
    import json

    if not paths.model_json.exists():
        return None
    return json.loads(paths.model_json.read_text())
