"""Adapters of a model's other steps that a GRPO step scores with, each in a LoRA slot of its own:

- the KL penalty's reference (`kl_ref_step`): one slot per model, loaded once per step asked for;
- the steps that sampled truncated turns of an earlier policy (a pipelined loop with top_p, top_k or
  min_p): the trainer finds each such token's kept set with the policy that sampled it
  (trainer/grpo_start.py). One slot per step behind, reused from step to step.

Each comes with its weights, which trainer ranks beyond this process load too.
"""

from __future__ import annotations

import torch

from ..store import checkpoints as ckpt
from ..trainer.grpo_config import GRPOConfig
from ..trainer.lora import LoraHost
from .trainable import TrainableModel

Loaded = tuple[str, dict[str, torch.Tensor]]  # (slot, weights)


class StepAdapters:
    def __init__(self) -> None:
        self._slots: dict[str, tuple[int, dict[str, torch.Tensor]]] = {}  # slot -> (step, weights)

    def _load(self, host: LoraHost, model: TrainableModel, slot: str, step: int) -> Loaded:
        cached = self._slots.get(slot)
        if cached is None or cached[0] != step:
            weights = ckpt.load_weights(model.paths.checkpoint(step))
            if not host.has_slot(slot):
                host.add_slot(slot, host.config(model.slot))
            host.load_weights(slot, weights)
            self._slots[slot] = (step, weights)
        return slot, self._slots[slot][1]

    def reference(self, host: LoraHost, model: TrainableModel, config: GRPOConfig) -> Loaded | None:
        """The slot holding step `config.kl_ref_step`'s adapter, the KL penalty's reference, and its
        weights; None for the base model. CheckpointNotFound (404) for a step the model has no
        checkpoint of."""
        step = config.kl_ref_step
        if step is None:
            return None
        steps = ckpt.complete_steps(model.paths)
        if step not in steps:
            raise ckpt.CheckpointNotFound(
                f"kl_ref_step {step}: {model.name} has no checkpoint of step {step} (it has steps "
                f"{', '.join(map(str, steps[-10:]))}{' and earlier' if len(steps) > 10 else ''})"
            )
        return self._load(host, model, f"ref-{model.slot}", step)

    def behind(self, host: LoraHost, model: TrainableModel, steps: set[int]) -> dict[int, Loaded]:
        """The adapters of `steps` (earlier steps that sampled truncated turns) that still have a
        checkpoint, by step; the others are missing (the trainer stands in for them and says so)."""
        have = set(ckpt.complete_steps(model.paths))
        wanted = sorted(s for s in steps if s in have)
        # One slot per step, kept while a step needs it (a pipelined loop's next step often needs the same
        # earlier step again); the slots of steps no longer needed are freed.
        for slot in [slot for slot in self._slots if slot.startswith("behind") and slot.endswith(f"-{model.slot}")]:
            if self._slots[slot][0] not in wanted:
                host.delete_slot(slot)
                del self._slots[slot]
        return {s: self._load(host, model, f"behind{s}-{model.slot}", s) for s in wanted}

    def forget(self, model: TrainableModel) -> None:
        """Drops the cached adapters of `model` (its checkpoints were replaced by a fork)."""
        for slot in [s for s in self._slots if s.endswith(f"-{model.slot}")]:
            del self._slots[slot]

    @staticmethod
    def slots_of(loaded: dict[int, Loaded]) -> dict[int, str]:
        return {step: slot for step, (slot, _) in loaded.items()}
