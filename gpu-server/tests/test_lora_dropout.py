"""LoRA dropout (`lora.dropout`) is active in the trainer's gradient passes, SFT's and GRPO's, and
nowhere else: serving and the trainer's scoring passes (proximal, reference, kept sets) run the
adapter whole, so with dropout a GRPO step takes the policy before its update from a clean pass.
Before, the model stayed in eval mode and a dropout above 0 did nothing at all."""

from __future__ import annotations

import pytest
import torch
from in_process import Holder

from art_server.trainer.grpo import train_step
from art_server.trainer.grpo_config import GRPOConfig
from art_server.trainer.grpo_prepare import prepare
from art_server.trainer.logprobs import pad_batch, token_logprobs
from art_server.trainer.lora import LoraHost, LoraSpec
from art_server.trainer.sequences import Sequence
from art_server.trainer.sft import SFTConfig, train_sft

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)


def host_with(tiny_path, dropout: float) -> LoraHost:
    host = LoraHost(Holder(tiny_path))
    host.add_slot("d", LoraSpec(dropout=dropout).peft_config(), seed=1)
    noise = torch.Generator().manual_seed(2)
    with torch.no_grad():  # B != 0, so the dropped inputs change the output
        for p in host.parameters("d"):
            p.add_(torch.randn(p.shape, generator=noise) * 0.1)
    host.activate("d")
    return host


def sequence() -> Sequence:
    s = Sequence()
    s.extend([5, 6, 7, 8], trained=False)
    s.extend([9, 10, 11], trained=True, logprobs=[-1.0] * 3)
    return s


def dropout_modes_seen(host: LoraHost, run) -> list[bool]:
    """The `training` flag of slot d's dropout layers at each of their calls during `run()`."""
    layers = [m.lora_dropout["d"] for m in host.model.modules() if "d" in getattr(m, "lora_dropout", {})]
    seen: list[bool] = []
    handles = [layer.register_forward_pre_hook(lambda module, args: seen.append(module.training)) for layer in layers]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


def test_dropout_acts_in_gradient_passes_only(tiny_path):
    host = host_with(tiny_path, 0.5)
    batch = pad_batch([sequence()], 0, host.device)
    with torch.no_grad():
        a, b = (token_logprobs(host.model, batch)[0] for _ in range(2))
        with host.dropout("d"):
            c, d = (token_logprobs(host.model, batch)[0] for _ in range(2))
    assert torch.equal(a, b)  # outside: the adapter whole, deterministic
    assert not torch.allclose(c, d) and not torch.allclose(a, c)  # inside: dropped inputs

    optimizer = torch.optim.AdamW(host.parameters("d"), lr=1e-3)
    sft = dropout_modes_seen(host, lambda: train_sft(host, "d", optimizer, [sequence()] * 2, SFTConfig(epochs=1), 0))
    assert sft and all(sft)
    group = [{"reward": r, "messages_and_choices": [turn(r)]} for r in (1.0, 0.0)]
    config = GRPOConfig(learning_rate=1e-3, gradient_steps=1)
    grpo = dropout_modes_seen(host, lambda: train_step(host, "d", optimizer, prepare([group], config, 100), config, 0))
    # A clean pass first (the policy before the update: the ratio's denominator and the sampler
    # correction), then the gradient pass with dropout.
    half = len(grpo) // 2
    assert grpo and grpo == [False] * half + [True] * half, grpo
    assert all(not m.training for m in host.model.modules())  # after the steps: eval mode everywhere again


def test_without_dropout_nothing_changes_mode(tiny_path):
    host = host_with(tiny_path, 0.0)
    optimizer = torch.optim.AdamW(host.parameters("d"), lr=1e-3)
    seen = dropout_modes_seen(host, lambda: train_sft(host, "d", optimizer, [sequence()] * 2, SFTConfig(epochs=1), 0))
    assert seen and not any(seen)


def turn(reward: float) -> dict:
    ids = [9, 10, 11] if reward else [12, 13]
    return {"kind": "choice", "prompt_token_ids": [5, 6, 7, 8], "token_ids": ids, "logprobs": [-1.0] * len(ids)}
