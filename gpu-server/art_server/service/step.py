"""One training step as a transaction, read top to bottom in `StepTransaction.run`:

1. prepare: snapshot the adapter and its optimizer; a sleeping engine (vLLM on one GPU) frees the device;
2. train: the step's work in a worker thread, its progress lines streamed back;
3. decide: save the checkpoint; the rename into place, right after `guard.check()` in the worker
   thread, is the one commit decision (a stop asked before it rolls the step back);
4. publish (committed): the new step number, serving `name@step`, the history row and trajectories;
   whoever still listens, the step completes;
   or roll back (anything before the commit failed or was stopped): the snapshot is put back, nothing
   is left on disk, the step number is unchanged.

Either way the engine wakes and the bare name serves again (`reopen`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.faults import fail_once
from ..engine.base import Engine
from ..store.history import append_row, link_step_trajectories, trajectory_rows
from ..trainer.guard import Snapshot, StepGuard, restore, take_snapshot
from ..trainer.lora import LoraHost
from .optimizer_phase import reset, starts_fresh
from .reporting import ReportingService
from .trainable import TrainableModel, save_step


class StepService(Protocol):
    """What a step needs of the training service (service/training.py) that runs it."""

    @property
    def lora(self) -> LoraHost: ...

    reports: ReportingService

    async def serve_step(self, model: TrainableModel, step: int) -> float: ...


log = logging.getLogger(__name__)

# The step's training work, run in a worker thread: (send a progress line, the guard) -> its metrics.
Work = Callable[[Callable[[dict[str, Any]], None], StepGuard], dict[str, Any]]


@dataclass
class StepPlan:
    """What one step trains and records, prepared (and checked) before the transaction starts."""

    work: Work
    trainable: bool  # False: nothing to train (every group skipped); the step still commits, as "untrained"
    reason: str | None  # why nothing trained, when not trainable
    details: list[str]  # what each skipped group was, when not trainable
    row: dict[str, Any]  # the history row, filled with metrics and timings as the step goes
    metrics: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    trajectories: list[list[dict[str, Any]]] | None = None  # GRPO's groups, stored with the checkpoint
    started: float = field(default_factory=time.perf_counter)  # when the step's own work began (perf_counter)
    price: float | None = None  # US dollars per hour of the machine: the row's cost_usd
    phase: str = "grpo"  # the step's kind, for the optimizer's phase (optimizer_phase.py)
    reset_optimizer: bool | None = None  # the step's option (None: reset when the phase changes)


class StepTransaction:
    """One step of `model` (see the module's comment). `cancel` asks it to stop; `lines` receives
    what the request streams (progress lines and warnings)."""

    def __init__(
        self,
        service: StepService,
        model: TrainableModel,
        engine: Engine,
        plan: StepPlan,
        lines: asyncio.Queue[dict[str, Any]],
        cancel: threading.Event,
    ):
        self.service = service
        self.model = model
        self.engine = engine
        self.plan = plan
        self.lines = lines
        self.guard = StepGuard(cancel)
        self.new_step = model.step + 1
        self.snapshot: Snapshot | None = None
        self.slept = False
        self.committed = False
        self.save_started = 0.0

    async def run(self) -> None:
        try:
            await self.prepare()
            await self.train()
            await self.decide()
        except BaseException:
            await self.roll_back()
            raise
        finally:
            if not self.committed:
                await self.reopen()
        # Committed: from here on the step completes, whether or not anyone still listens.
        try:
            await self.publish()
        finally:
            await self.reopen()

    async def prepare(self) -> None:
        if not self.plan.trainable:
            return
        self.snapshot = await asyncio.to_thread(take_snapshot, self.service.lora, self.model.slot, self.model.optimizer)
        if self.engine.sleeps_for_training:
            started = time.perf_counter()
            await self.engine.sleep()
            self.slept = True
            self.plan.timings["sleep_s"] = time.perf_counter() - started

    async def train(self) -> None:
        plan = self.plan
        if not plan.trainable:
            plan.metrics["nothing_trained"] = plan.reason
            if plan.details:
                plan.metrics["skip_details"] = plan.details[:10]
            self.lines.put_nowait({"type": "warning", "message": plan.reason, "details": plan.details[:10]})
            return
        if starts_fresh(self.model.optimizer_phase, plan.phase, plan.reset_optimizer):
            reset(self.model.optimizer)  # after the snapshot: a rolled-back step restores the old moments
            plan.metrics["optimizer_reset"] = True
        loop = asyncio.get_running_loop()

        def send(line: dict[str, Any]) -> None:  # from the worker thread
            loop.call_soon_threadsafe(self.lines.put_nowait, line)

        result = await loop.run_in_executor(None, plan.work, send, self.guard)
        plan.metrics.update({k: v for k, v in result.items() if k != "forward_backward_s"})
        plan.timings["forward_backward_s"] = result["forward_backward_s"]

    async def decide(self) -> None:
        """Saves the checkpoint; its rename into place is the commit. The history row and the
        trajectories travel inside it, so a crash right after the rename loses neither
        (registration restores them)."""
        plan = self.plan
        plan.row.update({**plan.metrics, "trained_into_step": self.new_step, **plan.timings})
        self.save_started = time.perf_counter()
        kind = "train" if plan.trainable else "untrained"
        phase = plan.phase if plan.trainable else self.model.optimizer_phase
        state = {"kind": kind, "metrics": plain(plan.metrics), "history_row": plain(plan.row), "optimizer_phase": phase}
        rows = trajectory_rows(plan.trajectories) if plan.trajectories is not None else None
        await asyncio.to_thread(self._save, state, rows)
        self.committed = True

    def _save(self, state: dict[str, Any], rows: list[Any] | None) -> None:
        fail_once("save")
        # guard.check() right before the rename is the step's one commit decision.
        save_step(self.service.lora, self.model, self.new_step, state, rows, before_publish=self.guard.check)

    async def roll_back(self) -> None:
        if self.snapshot is not None:
            await asyncio.to_thread(restore, self.service.lora, self.model.slot, self.model.optimizer, self.snapshot)

    async def publish(self) -> None:
        model, step, timings = self.model, self.new_step, self.plan.timings
        fail_once("exit_after_publish")
        timings["save_s"] = time.perf_counter() - self.save_started
        model.step = step
        if self.plan.trainable:
            model.optimizer_phase = self.plan.phase
        if self.slept:
            started = time.perf_counter()
            await self.engine.wake()
            self.slept = False
            timings["wake_s"] = time.perf_counter() - started
        try:
            timings["reload_s"] = await self.service.serve_step(model, step)
        except Exception as error:  # still on disk: `name@step` loads it on demand
            log.exception("step %d of %s is saved but could not be loaded for serving", step, model.name)
            message = f"step {step} is saved but could not be loaded for serving ({type(error).__name__}: {error})"
            self.lines.put_nowait({"type": "warning", "message": message})
        self.plan.row.update({**timings, **step_cost(self.plan)})
        try:
            await asyncio.to_thread(self._record)
        except OSError as error:
            message = f"step {step}'s history row could not be appended ({error}); the next start restores it from the checkpoint"
            self.lines.put_nowait({"type": "warning", "message": message})
        self.service.reports.wake(self.model)  # the trackers take the new row

    def _record(self) -> None:
        if self.plan.trajectories is not None:
            link_step_trajectories(self.model.paths, self.new_step)
        append_row(self.model.paths, plain(self.plan.row))

    async def reopen(self) -> None:
        """The step is over (committed or rolled back): the engine wakes and the bare name serves again."""
        try:
            if self.slept:
                await self.engine.wake()
        finally:
            self.model.gate.set()
            self.model.serve_previous = False


def step_cost(plan: StepPlan) -> dict[str, float]:
    """The step's wall time (`step_s`: from its checks to serving the new adapter) and, with a price,
    its cost: the machine is held while the step's rollouts sample (`sampling_s`, measured by the
    client) and while it trains."""
    step_s = time.perf_counter() - plan.started
    if plan.price is None:
        return {"step_s": step_s}
    hours = (plan.metrics.get("sampling_s", 0.0) + step_s) / 3600
    return {"step_s": step_s, "gpu_cost_per_hour_usd": plan.price, "cost_usd": plan.price * hours}


def plain(metrics: dict[str, Any]) -> dict[str, Any]:
    """What JSON holds of a metrics dict (no tensors or objects)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool, dict, list)) or v is None}
