"""The trainer's logprobs: a micro-batch whose rows share prompts (run once, their KV cache handed to
each row) gives the same logprobs and the same LoRA gradients as running every row in full."""

from __future__ import annotations

import random

import pytest
import torch
from in_process import Holder

from art_server.core.distribution import SamplingParams
from art_server.trainer import logprobs
from art_server.trainer.lora import LoraHost, LoraSpec
from art_server.trainer.sequences import Sequence

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)


# The turns of a micro-batch may each have been sampled otherwise (each is scored as it was).
MIXED = [SamplingParams(0.7), SamplingParams(1.0), SamplingParams(1.3, top_p=0.9), SamplingParams(0.8, top_k=5)]


def rows(rng: random.Random, vocab: int, layout: str) -> list[Sequence]:
    """`groups`: three prompts of different lengths, continued by 1-4 rows each; `turns`: six distinct
    prompts that share a 12-token system prefix. Half the rows have a second turn. Turns are sampled
    at mixed temperatures, top-p and top-k."""
    system = [rng.randrange(vocab) for _ in range(12)]
    plan = [(20, 4), (13, 3), (31, 1)] if layout == "groups" else [(rng.randint(3, 20), 1) for _ in range(6)]
    out = []
    for prompt_length, continuations in plan:
        prompt = (system if layout == "turns" else []) + [rng.randrange(vocab) for _ in range(prompt_length)]
        for _ in range(continuations):
            s = Sequence()
            s.extend(prompt, trained=False)
            s.extend([rng.randrange(vocab) for _ in range(rng.randint(1, 6))], trained=True, sampling=rng.choice(MIXED))
            if rng.random() < 0.5:  # a second turn: more context, then more sampled tokens
                s.extend([rng.randrange(vocab) for _ in range(5)], trained=False)
                s.extend([rng.randrange(vocab) for _ in range(3)], trained=True, sampling=rng.choice(MIXED))
            out.append(s)
    return out


def logprobs_and_grads(host: LoraHost, seqs: list[Sequence]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    host.model.zero_grad(set_to_none=True)
    host.activate("s")
    batch = logprobs.pad_batch(seqs, 0, host.device)
    lp, entropy, _ = logprobs.token_logprobs(host.model, batch, with_entropy=True)
    (lp * torch.linspace(0.5, 1.5, len(lp))).sum().backward()
    assert entropy is not None and entropy.shape == lp.shape and bool(torch.isfinite(entropy).all())
    assert bool(torch.isfinite(lp).all())  # a random token outside a row's top-k still scores finitely (kept)
    return lp.detach(), [p.grad.clone() for p in host.parameters("s")]


@pytest.mark.parametrize("layout, prompts_run", [("groups", 3), ("turns", 1)])
@pytest.mark.parametrize("chunk", [1024, 5])
def test_shared_prompts_give_the_logprobs_and_gradients_of_full_rows(tiny_path, monkeypatch, chunk, layout, prompts_run):
    monkeypatch.setattr(logprobs, "LM_HEAD_CHUNK", chunk)  # 5: several lm_head chunks, recomputed in backward
    host = LoraHost(Holder(tiny_path))
    host.add_slot("s", LoraSpec().peft_config(), seed=1)
    noise = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a non-identity adapter, so its gradients through the prompt matter
        for p in host.parameters("s"):
            p.add_(torch.randn(p.shape, generator=noise) * 0.05)
    seqs = rows(random.Random(0), 1000, layout)
    batch = logprobs.pad_batch(seqs, 0, host.device)
    assert len(batch.prompt_ids) == prompts_run and batch.input_ids.shape[1] < max(len(s.input_ids) for s in seqs)
    shared_lp, shared_grads = logprobs_and_grads(host, seqs)
    monkeypatch.setattr(logprobs, "MIN_SHARED_PREFIX", 10**9)  # every row in full
    assert len(logprobs.pad_batch(seqs, 0, host.device).prompt_ids) == 0
    full_lp, full_grads = logprobs_and_grads(host, seqs)
    assert len(shared_lp) == sum(s.trained_tokens for s in seqs)
    torch.testing.assert_close(shared_lp, full_lp, atol=1e-5, rtol=0)
    for a, b in zip(shared_grads, full_grads):  # the same up to fp32 summation order
        assert float((a - b).norm() / a.norm()) < 1e-4
