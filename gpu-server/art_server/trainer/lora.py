"""The LoRA adapters being trained, as slots of one PEFT model.

With the hf engine the trainer shares the engine's model (so nothing is loaded twice) and takes the
engine's model lock around every forward and backward; serving's decode steps interleave with
training micro-batches. With the vllm engine it loads its own copy of the base model.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from ..core import adapter_switch
from ..core.json_types import WholeNumber

TORCH_THREADS = torch.get_num_threads()

DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraSpec(BaseModel):
    """A trainable model's LoRA configuration, declared once: the register route's schema
    (RegisterRequest.lora), what model.json stores, and what PEFT gets."""

    model_config = ConfigDict(extra="forbid", strict=True)
    r: WholeNumber = Field(default=8, ge=1, le=512)
    alpha: WholeNumber = Field(default=16, ge=1, le=4096)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=lambda: list(DEFAULT_TARGETS), min_length=1, max_length=64
    )

    def peft_config(self) -> Any:
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )


class LoraHost:
    """LoRA slots on `holder.model`; the holder (the hf engine's runner, or the trainer's own copy
    of the base model) has a replaceable `.model` and a `.device`."""

    def __init__(self, holder: Any, lock: threading.RLock | None = None):
        self.holder = holder
        self.lock = lock or threading.RLock()
        # Training uses every core torch was given at start (decode steps may set fewer).
        self.threads = TORCH_THREADS

    @property
    def model(self) -> Any:
        return self.holder.model

    @property
    def device(self) -> torch.device:
        return self.holder.device

    def _peft(self) -> Any:
        from peft import PeftModel

        return self.model if isinstance(self.model, PeftModel) else None

    def add_slot(self, slot: str, config: Any, seed: int = 0) -> None:
        """Adds a LoRA slot; `seed` fixes its initialisation (A random, B zero), so a run is reproducible."""
        from peft import get_peft_model

        with self.lock, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            peft = self._peft()
            if peft is None:
                self.holder.model = get_peft_model(self.model, config, adapter_name=slot)
            elif slot not in peft.peft_config:
                # Unlike get_peft_model, add_adapter leaves the base model's id unset, and this slot's
                # checkpoints would name no base model (adapter_config.json's base_model_name_or_path).
                if config.base_model_name_or_path is None:
                    config.base_model_name_or_path = next(iter(peft.peft_config.values())).base_model_name_or_path
                peft.add_adapter(slot, config)
            adapter_switch.forget(self.model)
            self.model.eval()  # no dropout outside a gradient pass (see dropout() below)

    def slots(self) -> list[str]:
        peft = self._peft()
        return sorted(peft.peft_config) if peft is not None else []

    def has_slot(self, slot: str) -> bool:
        peft = self._peft()
        return peft is not None and slot in peft.peft_config

    def config(self, slot: str) -> Any:
        return self._peft().peft_config[slot]

    def weights(self, slot: str) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        with self.lock:
            return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model, adapter_name=slot).items()}

    def load_weights(self, slot: str, weights: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        with self.lock:
            result = set_peft_model_state_dict(self.model, {k: v.to(self.device) for k, v in weights.items()}, adapter_name=slot)
            unexpected = getattr(result, "unexpected_keys", [])
            if unexpected:
                raise ValueError(f"checkpoint does not fit the adapter: unexpected keys {unexpected[:3]}")

    def parameters(self, slot: str) -> list[torch.nn.Parameter]:
        marker = f".{slot}."
        return [p for n, p in self.model.named_parameters() if marker in n]

    def activate(self, slot: str) -> None:
        """Makes `slot` the active, trainable adapter. PEFT's set_adapter (which also sets
        requires_grad) costs time in proportion to every adapter loaded, so it runs only when
        something changed: serving and reference passes switch adapters without touching this
        state (core/adapter_switch.py)."""
        params = self.parameters(slot)
        if self._peft().active_adapter != slot or not all(p.requires_grad for p in params):
            self._peft().set_adapter(slot)
            for p in params:
                p.requires_grad_(True)
        if self.device.type == "cpu":
            torch.set_num_threads(self.threads)

    @contextlib.contextmanager
    def dropout(self, slot: str) -> Iterator[None]:
        """`slot`'s LoRA dropout active for the passes inside (a gradient pass); everything else,
        serving and the trainer's scoring passes, runs without it (the model stays in eval mode)."""
        layers = [m.lora_dropout[slot] for m in self.model.modules() if slot in getattr(m, "lora_dropout", {})]
        for layer in layers:
            layer.train()
        try:
            yield
        finally:
            for layer in layers:
                layer.eval()

    def dropout_rate(self, slot: str) -> float:
        return float(getattr(self.config(slot), "lora_dropout", 0.0) or 0.0)

    @contextlib.contextmanager
    def using(self, slot: str) -> Iterator[None]:
        """`slot` active for the forward passes inside (a reference adapter's, under no_grad)."""
        with adapter_switch.use(self._peft(), slot):
            yield

    @contextlib.contextmanager
    def base_only(self) -> Iterator[None]:
        """The base model alone for the forward passes inside (under no_grad)."""
        with adapter_switch.use(self._peft(), None):
            yield

    def delete_slot(self, slot: str) -> None:
        with self.lock:
            if self.has_slot(slot):
                self._peft().delete_adapter(slot)
                adapter_switch.forget(self.model)
