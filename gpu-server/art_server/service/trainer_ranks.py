"""Where the trainer's model lives and which ranks train it: the LoRA host (the hf engine's own model,
or a copy of the base for engines that do not share theirs), and the ranks beyond this process
(trainer/ranks.py) that a step fans out to when there are several."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import torch

from ..engine.base import Engine
from ..trainer.lora import LoraHost
from ..trainer.ranks import RankPlan, RankPool
from ..trainer.sharding import shard_base, shard_elements
from .trainable import TrainableModel


class TrainerHolder:
    """The trainer's own copy of the base model, for engines that do not share theirs (vllm)."""

    def __init__(self, path: Path, device: str):
        from transformers import AutoModelForCausalLM

        self.device = torch.device("cuda" if device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True).to(self.device)  # pyright: ignore[reportArgumentType]  (transformers' stubs type .to() oddly)


class TrainerRanks:
    """The LoRA host (made by the first registration) and the trainer ranks beyond this process."""

    def __init__(self, device: str):
        self.device = device
        self.host: LoraHost | None = None
        self.pool: RankPool | None = None  # trainer ranks beyond this process, when configured
        self.threads: int | None = None  # CPU threads of training in this process (None: every core torch has)

    async def start(self, plan: RankPlan) -> None:
        """Brings the trainer ranks together (RankSetupError when they cannot be)."""
        self.threads = plan.threads(0)
        if self.host is not None:
            self.host.threads = self.threads
        if plan.world > 1:
            self.pool = RankPool(plan)
            await asyncio.to_thread(self.pool.start)

    def make_host(self, engine: Engine, base_path: Path) -> LoraHost:
        if self.host is None:
            shared = engine.shared_model()
            if self.pool is not None and self.pool.plan.shard_base:
                # a sharded model only runs with every rank: the trainer keeps its own, apart from serving
                holder = TrainerHolder(base_path, self.device)
                shard_base(holder.model)
                self.host = LoraHost(holder, threading.RLock())
            elif shared is not None:  # the hf engine: train on its model, under its lock
                self.host = LoraHost(*shared)
            else:
                self.host = LoraHost(TrainerHolder(base_path, self.device), threading.RLock())
            if self.threads:
                self.host.threads = self.threads
        return self.host

    def describe(self) -> dict[str, Any]:
        """The trainer ranks as /v1/engine/stats shows them (with a sharded base, what rank 0 holds of it)."""
        if self.pool is None:
            return {"world": 1, "threads": self.threads}
        out = self.pool.describe()
        if self.host is not None and self.pool.plan.shard_base:
            out.update(shard_elements(self.host.model))  # on rank 0
        return out

    def run(
        self,
        model: TrainableModel,
        base_path: Path | None,
        kind: str,
        args: tuple[Any, ...],
        train: Any,
        ref: tuple[str, dict[str, torch.Tensor]] | None = None,
        behind: dict[int, tuple[str, dict[str, torch.Tensor]]] | None = None,
    ) -> Any:
        """`train(sync)` on every rank when there are several (the workers get `args`, and the slots
        and weights of the KL reference and of the steps behind), else here alone."""
        if self.pool is None:
            return train(None)
        assert self.host is not None, "no model is registered yet"
        host = self.host
        dtype = str(host.model.get_input_embeddings().weight.dtype).removeprefix("torch.")
        header = {
            "kind": kind,
            "slot": model.slot,
            "lora": host.config(model.slot),
            "weights": host.weights(model.slot),
            "base_path": str(base_path),
            "dtype": dtype,
            "args": args,
            "shard_base": self.pool.plan.shard_base,
            "ref": ref,
            "behind": behind or {},
        }
        return self.pool.run(header, train)

    async def close(self) -> None:
        if self.pool is not None:
            await asyncio.to_thread(self.pool.close)
