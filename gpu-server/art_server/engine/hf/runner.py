"""Forward passes of a base model with one LoRA adapter (or none) chosen per call: what the
scheduler drives and the trainer shares. Needs only torch, transformers and peft. The logits are
the float32 head's (core/head.py), as the trainer computes them."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from ...core import adapter_switch
from ...core.compat import cache_kwargs, output_cache
from ...core.head import decoder_and_head, model_logits


class HFModelRunner:
    """Forward passes of the base model with one adapter (or none) chosen per call."""

    def __init__(self, model: Any, tokenizer: Any, device: torch.device):
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.adapter_slots: dict[str, str] = {}  # public key (e.g. "agent@3") -> PEFT adapter name
        self._slot_counter = 0

    @property
    def peft(self) -> Any:
        from peft import PeftModel

        return self.model if isinstance(self.model, PeftModel) else None

    def forward(
        self,
        adapter: str | None,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: Any,
    ) -> tuple[torch.Tensor, Any]:
        from transformers import DynamicCache

        peft = self.peft
        slot = None if adapter is None else self.adapter_slots[adapter]
        decoder, _ = decoder_and_head(self.model)
        with adapter_switch.use(peft, slot) if peft is not None else contextlib.nullcontext(), torch.inference_mode():
            out = decoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                **cache_kwargs(decoder, past_key_values if past_key_values is not None else DynamicCache()),
                use_cache=True,
            )
            # The head in float32 at the last position only, as the trainer runs it (core/head.py).
            logits = model_logits(self.model, out.last_hidden_state[:, -1:])
        return logits, output_cache(out)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def load_adapter(self, key: str, path: Path) -> None:
        from peft import PeftModel

        self._slot_counter += 1
        slot = f"serve{self._slot_counter}"  # PEFT module keys cannot hold every character of a key
        try:
            if self.peft is None:
                self.model = PeftModel.from_pretrained(self.model, str(path), adapter_name=slot, is_trainable=False)
            else:
                self.peft.load_adapter(str(path), adapter_name=slot, is_trainable=False)
        except BaseException:
            # PEFT injects the adapter's layers before it reads the weights: take them out again.
            if self.peft is not None and slot in self.peft.peft_config:
                self.peft.delete_adapter(slot)
            raise
        finally:
            adapter_switch.forget(self.model)
        old = self.adapter_slots.get(key)
        self.adapter_slots[key] = slot
        peft = self.peft
        if old and peft is not None:
            peft.delete_adapter(old)
            adapter_switch.forget(self.model)
        self.model.eval()

    def unload_adapter(self, key: str) -> None:
        slot = self.adapter_slots.pop(key, None)
        if slot and self.peft is not None:
            self.peft.delete_adapter(slot)
            adapter_switch.forget(self.model)
