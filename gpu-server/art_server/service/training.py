"""The training service: registers trainable models and runs their steps end to end.

A GRPO or SFT step: prepare sequences, (vllm: put the engine to sleep), train in a worker thread
while progress lines stream back, save the checkpoint atomically, serve the new adapter as
`name@step`, append history and trajectories. Requests for the bare model name wait for the new
step (unless the step asked to keep serving the previous one); no request fails because of training.

A step runs as a task of its own, not in the request that asked for it: the request streams its
lines and, if its client leaves (or the server stops), asks it to stop. The step decides once
whether it happened, in the worker thread right before its checkpoint's rename (the commit): until
then it rolls back completely (weights, optimizer, no checkpoint, no history row); from then on it
completes (step number, serving, history row) whoever is still listening.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

from ..chat.turn_end import end_of_turn_ids, generation_eos
from ..core.provenance import check_groups
from ..engine.base import Engine
from ..store import checkpoints as ckpt
from ..store.history import group_metrics, read_history
from ..trainer.grpo import train_step
from ..trainer.grpo_config import GRPOConfig
from ..trainer.grpo_prepare import check_token_ids, nothing_trained_reason, prepare
from ..trainer.grpo_start import stand_in_notice
from ..trainer.lora import LoraHost, LoraSpec
from ..trainer.ranks import RankPlan
from ..trainer.sequences import not_append_only_notice
from ..trainer.sft import SFTConfig, sft_sequence, train_sft
from . import model_records
from .reporting import ReportingService, ReportSettings, server_default
from .step import StepPlan, StepTransaction
from .step_adapters import StepAdapters
from .trainable import RegistrationError, TrainableModel, register, registration_conflict
from .trainer_ranks import TrainerRanks

log = logging.getLogger(__name__)

SLOT_PREFIX = "train"  # the PEFT adapter names of training slots (serving slots are the engine's)
SERVED_STEPS = 4  # adapter steps of one model kept loaded for serving; older ones load on demand


class TrainingService:
    def __init__(self, manager: Any):
        self.manager = manager  # ModelManager: the engine, served adapters, base model
        self.models: dict[str, TrainableModel] = {}  # by name (served names are unique per server)
        self.trainer = TrainerRanks(manager.config.device)  # the LoRA host and the ranks that train it
        self._slots = itertools.count()
        self._register_lock = asyncio.Lock()
        self._steps: dict[asyncio.Task, threading.Event] = {}  # running steps and the event that stops each
        self.step_adapters = StepAdapters()  # adapters of other steps a step scores with (KL reference, steps behind)
        self._turn_ends: tuple[Path | None, set[int]] | None = None
        self.reports = ReportingService(server_default(manager.config))  # experiment tracking

    async def start_ranks(self, plan: RankPlan) -> None:
        """Brings the trainer ranks together (RankSetupError when they cannot be)."""
        await self.trainer.start(plan)

    def ranks(self) -> dict[str, Any]:
        """The trainer ranks as /v1/engine/stats shows them."""
        return self.trainer.describe()

    @property
    def lora(self) -> LoraHost:
        """The LoRA slots models train in (made by the first registration)."""
        assert self.trainer.host is not None, "no model is registered yet"
        return self.trainer.host

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    @property
    def tokenizer(self) -> Any:
        return self.manager.require_engine().tokenizer

    def turn_ends(self) -> set[int]:
        """The tokens that end a sampled turn of the base model (chat/turn_end.py), where SFT's trained tokens stop."""
        base = self.manager.base_path
        if self._turn_ends is None or self._turn_ends[0] != base:
            eos = generation_eos(base) if base is not None else None
            self._turn_ends = (base, end_of_turn_ids(self.tokenizer, eos))
        return self._turn_ends[1]

    async def register(
        self, name: str, project: str, base_model: str, lora: LoraSpec | None, report: ReportSettings | None = None
    ) -> dict[str, Any]:
        # One registration at a time: concurrent first registrations of a name would both create it.
        async with self._register_lock:
            existing = self.models.get(name)
            if existing is not None:
                conflict = registration_conflict(existing, project, base_model, lora)
                if conflict:
                    raise RegistrationError(conflict)
                await self.reports.configure(existing, report)
                return {**existing.info(), "resumed": True}
            if name in self.manager.adapters:
                raise RegistrationError(
                    f"{name!r} is the name of adapters loaded with /v1/load_lora_adapter "
                    f"({', '.join(f'{name}@{s}' for s in sorted(self.manager.adapters[name]))}); a trained "
                    "model needs a name of its own: pick another, or unload them first"
                )
            engine = await self.manager.ensure_base(base_model)
            host = self.trainer.make_host(engine, self.manager.base_path)
            model, resumed = await asyncio.to_thread(
                register, host, self.manager.config.data_dir, name, project, base_model, lora, f"{SLOT_PREFIX}{next(self._slots)}"
            )
            self.models[name] = model
            await self.serve_step(model, model.step)
            await self.reports.configure(model, report)
            log.info("%s %s/%s at step %d", "resumed" if resumed else "registered", project, name, model.step)
            return {**model.info(), "resumed": resumed}

    def drop_reference(self, model: TrainableModel) -> None:
        """Forgets the cached adapters of `model`'s other steps (its checkpoints were replaced by a fork)."""
        self.step_adapters.forget(model)

    def slots(self) -> list[str]:
        """The LoRA slots models train in (a failed registration must leave none behind)."""
        host = self.trainer.host
        return [s for s in host.slots() if s.startswith(SLOT_PREFIX)] if host is not None else []

    def cancel_all(self) -> None:
        """Asks every running step to stop (the server is stopping): each rolls back at its next
        micro-batch, or completes if it is already past its commit."""
        for cancel in self._steps.values():
            cancel.set()

    async def stop(self, timeout: float = 30.0) -> None:
        """Stops every running step and waits for each to roll back or commit, then lets the
        trackers take the last rows."""
        self.cancel_all()
        if self._steps:
            await asyncio.wait(list(self._steps), timeout=timeout)
        await self.reports.close_all(list(self.models.values()))
        await self.trainer.close()

    def get(self, name: str) -> TrainableModel:
        model = self.models.get(name)
        if model is None:
            raise KeyError(f"model {name!r} is not registered on this server; register it first (POST /v1/art/models/register)")
        return model

    async def serve_step(self, model: TrainableModel, step: int) -> float:
        """Loads checkpoint `step` for serving as name@step; returns the seconds it took."""
        started = time.perf_counter()
        # The checkpoint was just saved by this step, or just loaded into the trainer when resuming.
        await self.manager.add_adapter(model.name, step, model.paths.checkpoint(step), checked=False)
        loaded = sorted(self.manager.adapters.get(model.name, {}))
        for old in loaded[:-SERVED_STEPS]:
            await self.manager.remove_adapter(model.name, old)
        return time.perf_counter() - started

    def checkpoint_path(self, name: str, step: int) -> Path | None:
        model = self.models.get(name)
        if model is None or step not in ckpt.complete_steps(model.paths):
            return None
        return model.paths.checkpoint(step)

    # -- steps -------------------------------------------------------------------------------
    async def idle(self, model: TrainableModel) -> None:
        """Waits for the step task of a step whose request ended early (it rolls back, or completes
        if it was past its commit), so two steps never touch one adapter at once."""
        if model.worker is not None and not model.worker.done():
            await asyncio.wait([model.worker])

    def _check_tokens(self, groups: list[list[dict[str, Any]]]) -> None:
        host = self.trainer.host
        if host is not None:
            check_token_ids(groups, host.model.get_input_embeddings().num_embeddings)

    async def train(
        self,
        name: str,
        groups: list[list[dict[str, Any]]],
        config: GRPOConfig,
        serve_previous: bool = False,
        pipeline: dict[str, float] | None = None,
        price: float | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """One GRPO step; `pipeline` holds what a pipelined client measured (stale groups, sampling
        throughput and time, the judge calls of its groups), recorded as metrics where not 0; `price` what the machine's hour costs."""
        model = self.get(name)
        async with model.lock:
            await self.idle(model)
            timings: dict[str, float] = {}
            started = time.perf_counter()
            engine = self.manager.require_engine()
            # Everything is checked before the weights are touched: a refused step is a 400.
            provenance = self.manager.provenance

            tokenizer = self.tokenizer
            ends = await asyncio.to_thread(self.turn_ends)

            def render(trajectory: dict[str, Any]) -> Any:  # plain assistant messages, as SFT tokenises them
                messages = trajectory["messages_and_choices"]
                return sft_sequence(tokenizer, messages, trajectory.get("tools"), "all_assistant", ends)

            def check_and_prepare() -> tuple[list[str], Any, Any, Any]:  # CPU work: off the event loop
                warnings = check_groups(provenance, groups)
                self._check_tokens(groups)
                prepared = prepare(groups, config, engine.context_length, model.step, render)
                if prepared.sequences_split:
                    prepared.notices.append(not_append_only_notice(model.base_model))
                adapters = self.step_adapters
                ref = adapters.reference(self.lora, model, config)
                steps_behind = prepared.truncated_steps_behind()
                behind = adapters.behind(self.lora, model, steps_behind)
                if steps_behind - set(behind):
                    prepared.notices.append(stand_in_notice(sorted(steps_behind - set(behind))))
                return warnings, prepared, ref, behind

            warnings, prepared, ref, behind = await asyncio.to_thread(check_and_prepare)
            ref_slot = ref[0] if ref else None
            timings["tokenize_s"] = time.perf_counter() - started
            from_step, new_step = model.step, model.step + 1
            metrics: dict[str, Any] = {
                **group_metrics(groups),
                "groups_trained": prepared.groups - sum(prepared.skipped.values()),
                "groups_skipped": sum(prepared.skipped.values()),
                "groups_skipped_by_reason": dict(prepared.skipped),
                "trajectories_trained": prepared.trajectories_trained,
                "sequences": len(prepared.items),
                "sequences_split": prepared.sequences_split,
                **({"unsampled_trajectories_trained": prepared.unsampled} if prepared.unsampled else {}),
                **prepared.lag_metrics(),
                **{k: v for k, v in (pipeline or {}).items() if v},
            }
            yield {"type": "start", "from_step": from_step, "step": new_step, **metrics}
            for message in [*warnings, *prepared.notices]:
                yield {"type": "warning", "message": message}
            plan = StepPlan(
                work=lambda progress, guard: self.trainer.run(
                    model,
                    self.manager.base_path,
                    "grpo",
                    (prepared, config, self.pad_id),
                    lambda sync: train_step(
                        self.lora,
                        model.slot,
                        model.optimizer,
                        prepared,
                        config,
                        self.pad_id,
                        progress,
                        guard,
                        sync,
                        ref_slot,
                        StepAdapters.slots_of(behind),
                    ),
                    ref,
                    behind,
                ),
                trainable=bool(prepared.items),
                reason=None if prepared.items else nothing_trained_reason(prepared),
                details=prepared.skip_details,
                row={"step": from_step, "split": "train", "time": time.time(), "kind": "grpo"},
                metrics=metrics,
                timings=timings,
                trajectories=groups,
                started=started,
                price=price,
                phase="grpo",
                reset_optimizer=config.reset_optimizer,
            )
            async for line in self._run_step(model, engine, serve_previous, plan):
                yield line
            for message in self.reports.notices(model):
                yield {"type": "warning", "message": message}
            yield {"type": "result", "step": new_step, "metrics": plan.row}

    async def train_sft(
        self, name: str, conversations: list[dict[str, Any]], config: SFTConfig, price: float | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        model = self.get(name)
        async with model.lock:
            await self.idle(model)
            timings: dict[str, float] = {}
            started = time.perf_counter()
            tok = self.tokenizer
            ends = await asyncio.to_thread(self.turn_ends)
            sequences = []
            for i, c in enumerate(conversations):
                try:
                    sequences.append(
                        await asyncio.to_thread(sft_sequence, tok, c["messages"], c.get("tools"), config.train_on, ends)
                    )
                except ValueError as error:
                    raise ValueError(f"conversation {i}: {error}") from None
            timings["tokenize_s"] = time.perf_counter() - started
            engine = self.manager.require_engine()
            limit = engine.context_length
            long = [i for i, s in enumerate(sequences) if len(s.input_ids) > limit]
            if long:
                raise ValueError(f"conversations {long[:5]} are longer than the context ({limit} tokens)")
            from_step, new_step = model.step, model.step + 1
            metrics: dict[str, Any] = {"conversations": len(sequences), "tokens": sum(s.trained_tokens for s in sequences)}
            yield {"type": "start", "from_step": from_step, "step": new_step, **metrics}
            plan = StepPlan(
                work=lambda progress, guard: self.trainer.run(
                    model,
                    self.manager.base_path,
                    "sft",
                    (sequences, config, self.pad_id),
                    lambda sync: train_sft(
                        self.lora, model.slot, model.optimizer, sequences, config, self.pad_id, progress, guard, sync
                    ),
                ),
                trainable=bool(sequences),
                reason="no conversations were sent",
                details=[],
                row={"step": from_step, "split": "sft", "time": time.time(), "kind": "sft"},
                metrics=metrics,
                timings=timings,
                started=started,
                price=price,
                phase="sft",
                reset_optimizer=config.reset_optimizer,
            )
            async for line in self._run_step(model, engine, False, plan):
                yield line
            for message in self.reports.notices(model):
                yield {"type": "warning", "message": message}
            yield {"type": "result", "step": new_step, "metrics": plan.row}

    async def _run_step(
        self, model: TrainableModel, engine: Engine, serve_previous: bool, plan: StepPlan
    ) -> AsyncIterator[dict[str, Any]]:
        """Starts the step's transaction as a task of its own and streams its lines; a request that
        ends early (its client left) asks the step to stop. Fills the plan's metrics, timings and row."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        cancel = threading.Event()
        model.serve_previous = serve_previous
        if not serve_previous:
            model.gate.clear()
        task = asyncio.create_task(StepTransaction(self, model, engine, plan, queue, cancel).run())
        model.worker = task
        self._steps[task] = cancel
        task.add_done_callback(self._step_done)
        getter: asyncio.Future | None = None
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                while not queue.empty():
                    yield queue.get_nowait()
                break
            task.result()  # the step's error, if it failed
        except BaseException:
            cancel.set()  # the client left (or the server stops): roll back, unless it has committed
            raise
        finally:
            if getter is not None:
                getter.cancel()

    def _step_done(self, task: asyncio.Task) -> None:
        self._steps.pop(task, None)
        if not task.cancelled():
            task.exception()  # read, so a step abandoned by its request logs no "exception never retrieved"

    async def log(
        self,
        name: str,
        split: str,
        groups: list[list[dict[str, Any]]],
        step: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Stores `groups` and appends their metrics (and `extra`) as a history row."""
        model = self.get(name)
        row = await model_records.log_groups(model, split, groups, step, extra)
        self.reports.wake(model)
        return row

    def history(self, name: str) -> list[dict[str, Any]]:
        return read_history(self.get(name).paths)

    def checkpoints(self, name: str) -> list[dict[str, Any]]:
        return model_records.list_checkpoints(self.get(name))

    async def delete_checkpoints(self, name: str, keep_best_by: str = "val/reward") -> dict[str, Any]:
        """Deletes every checkpoint but the latest and the best by `split/metric` (higher is better)."""
        model = self.get(name)
        async with model.lock:
            return await model_records.delete_checkpoints(self.manager, model, keep_best_by)
