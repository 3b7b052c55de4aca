"""core/adapter_switch.py: choosing the adapter of a forward pass without PEFT's per-switch cost
gives exactly PEFT's own answers, and leaves the trainer's state (active slot, requires_grad) as it
was. Fails if a PEFT release stops reading the attributes the switch sets."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from art_server.core import adapter_switch
from art_server.trainer.lora import LoraHost

pytestmark = pytest.mark.fast

SLOTS = ["train0", "serve1", "serve2"]


@pytest.fixture(scope="module")
def peft_model(tiny_path):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32).eval()
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0, init_lora_weights=False
    )
    model = get_peft_model(base, config, adapter_name=SLOTS[0])
    for slot in SLOTS[1:]:
        model.add_adapter(slot, config)
    model.set_adapter(SLOTS[0])  # the trainer's slot is PEFT's active one
    return model.eval()


IDS = torch.tensor([[5, 17, 42, 9, 3], [8, 8, 1, 30, 2]])


def peft_logits(model, slot: str | None) -> torch.Tensor:
    """The same forward with PEFT's own switches."""
    active = model.active_adapter
    try:
        if slot is None:
            with model.disable_adapter(), torch.inference_mode():
                return model(input_ids=IDS).logits
        model.set_adapter(slot)
        with torch.inference_mode():
            return model(input_ids=IDS).logits
    finally:
        model.set_adapter(active)


def switched_logits(model, slot: str | None) -> torch.Tensor:
    with adapter_switch.use(model, slot), torch.inference_mode():
        return model(input_ids=IDS).logits


@pytest.mark.parametrize("slot", [None, *SLOTS])
def test_each_adapter_and_the_base_give_exactly_peft_own_logits(peft_model, slot):
    assert torch.equal(switched_logits(peft_model, slot), peft_logits(peft_model, slot))


def test_the_adapters_differ_so_the_comparison_can_fail(peft_model):
    outputs = [switched_logits(peft_model, slot) for slot in [None, *SLOTS]]
    for i in range(len(outputs)):
        for j in range(i + 1, len(outputs)):
            assert not torch.allclose(outputs[i], outputs[j])


def test_the_trainer_state_is_put_back_after_each_block(peft_model):
    grads = {n: p.requires_grad for n, p in peft_model.named_parameters()}
    for slot in [None, "serve2", "serve1"]:
        switched_logits(peft_model, slot)
    assert peft_model.active_adapter == SLOTS[0]
    assert {n: p.requires_grad for n, p in peft_model.named_parameters()} == grads
    assert all(
        not layer.disable_adapters and layer.active_adapters == [SLOTS[0]] for layer in adapter_switch.lora_layers(peft_model)
    )


def test_the_layer_list_follows_adapters_added_and_deleted(peft_model):
    from peft import LoraConfig
    from peft.tuners.tuners_utils import BaseTunerLayer

    before = adapter_switch.lora_layers(peft_model)
    peft_model.add_adapter(
        "wide", LoraConfig(r=4, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"], init_lora_weights=False)
    )
    try:
        assert len(adapter_switch.lora_layers(peft_model)) > len(before)
        assert torch.equal(switched_logits(peft_model, "wide"), peft_logits(peft_model, "wide"))
    finally:
        peft_model.delete_adapter("wide")
        peft_model.set_adapter(SLOTS[0])
    # PEFT keeps the layers it wrapped (now without "wide"): the list is a fresh scan's again.
    assert adapter_switch.lora_layers(peft_model) == [m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)]
    assert torch.equal(switched_logits(peft_model, None), peft_logits(peft_model, None))


class _Holder:
    def __init__(self, model):
        self.model = model
        self.device = torch.device("cpu")


def test_the_trainer_activates_its_slot_for_gradients_after_serving_switched(peft_model):
    host = LoraHost(_Holder(peft_model))
    host.activate("serve1")  # another model's training slot, as when two models train in turn
    assert all(p.requires_grad for p in host.parameters("serve1"))
    assert not any(p.requires_grad for p in host.parameters(SLOTS[0]))
    switched_logits(peft_model, None)
    host.activate(SLOTS[0])
    assert peft_model.active_adapter == SLOTS[0] and all(p.requires_grad for p in host.parameters(SLOTS[0]))
    assert not any(p.requires_grad for p in host.parameters("serve1"))
    with host.base_only(), torch.no_grad():
        base = peft_model(input_ids=IDS).logits
    assert torch.equal(base, peft_logits(peft_model, None))


def test_a_slot_deleted_and_added_again_with_other_layers_is_switched_on_all_of_them(peft_model):
    from peft import LoraConfig

    host = LoraHost(_Holder(peft_model))
    narrow = LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False)
    wide = LoraConfig(r=4, target_modules=["q_proj", "k_proj", "o_proj", "gate_proj"], init_lora_weights=False)
    host.add_slot("again", narrow)
    switched_logits(peft_model, "again")
    host.delete_slot("again")
    host.add_slot("again", wide, seed=1)  # the same names as before: only `forget` tells the switch
    try:
        assert torch.equal(switched_logits(peft_model, "again"), peft_logits(peft_model, "again"))
    finally:
        host.delete_slot("again")
        peft_model.set_adapter(SLOTS[0])
