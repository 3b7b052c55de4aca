"""What a GRPO step reports. Its tokens per second count every pass it runs: the gradient passes,
the KL reference's and the start-of-step passes of later gradient steps (each without a gradient,
each a full forward); before, only the gradient passes counted, so a step with a KL penalty reported
half its work. Its loss, clip fraction and KL are means over its tokens in every length
normalisation; before, under "constant" they were sums scaled by Dr. GRPO's constant."""

from __future__ import annotations

import pytest
import torch
from in_process import Holder

from art_server.trainer.grpo import train_step
from art_server.trainer.grpo_config import GRPOConfig
from art_server.trainer.grpo_prepare import prepare
from art_server.trainer.lora import LoraHost, LoraSpec

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)


def groups() -> list[list[dict]]:
    def answer(g: int, i: int) -> dict:
        ids = [10 + g, 20 + i, 30 + i]
        turn = {
            "kind": "choice",
            "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10 + g],
            "token_ids": ids,
            "logprobs": [-2.0] * 3,
        }
        return {"reward": float(i % 2), "messages_and_choices": [turn]}

    return [[answer(g, i) for i in range(4)] for g in range(2)]


def metrics_of(tiny_path, config: GRPOConfig) -> dict:
    host = LoraHost(Holder(tiny_path))
    host.add_slot("s", LoraSpec().peft_config(), seed=1)
    optimizer = torch.optim.AdamW(host.parameters("s"), lr=config.learning_rate)
    return train_step(host, "s", optimizer, prepare(groups(), config, 100), config, 0)


def tokens_run(tiny_path, config: GRPOConfig) -> int:
    return metrics_of(tiny_path, config)["trainer_tokens"]


def test_every_pass_counts(tiny_path):
    # One micro-batch per gradient step (16 rows fit): each pass runs both groups' prompts once.
    plain = tokens_run(tiny_path, GRPOConfig(learning_rate=1e-3))
    assert plain > 0
    assert tokens_run(tiny_path, GRPOConfig(learning_rate=1e-3, kl_coef=0.1)) == 2 * plain  # + the reference's pass
    # Two gradient steps of one group each: the second's start-of-step pass runs its group again.
    split = tokens_run(tiny_path, GRPOConfig(learning_rate=1e-3, gradient_steps=2))
    assert plain < split < 2 * plain


def test_loss_clip_fraction_and_kl_are_means_under_every_length_normalization(tiny_path):
    """Every answer here has 3 tokens, so "token" and "constant" weigh all tokens alike: their
    means must agree (the sampler's made-up logprobs of -2 put ratios outside the clip range)."""
    base = {"learning_rate": 1e-3, "sampler_correction": "none", "kl_coef": 0.1, "scale_rewards": True}
    token = metrics_of(tiny_path, GRPOConfig(length_normalization="token", **base))
    constant = metrics_of(tiny_path, GRPOConfig(length_normalization="constant", normalization_tokens=1024, **base))
    for key in ("loss", "clip_fraction", "approx_kl", "kl_ref"):
        assert constant[key] == pytest.approx(token[key], rel=1e-5, abs=1e-9), (key, constant[key], token[key])
    assert 0 < token["clip_fraction"] <= 1 and token["approx_kl"] > 0.01
