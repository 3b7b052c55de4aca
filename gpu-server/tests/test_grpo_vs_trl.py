"""This trainer's GRPO loss against an independent implementation, TRL's (GRPOTrainer._compute_loss,
trl pinned in the dev extra), on identical inputs: equal loss and gradients within 1e-6 in fp32, for
every loss type both have.

TRL's method is called on a stand-in for its trainer holding only the settings the loss reads, and
its model pass returns the same per-token logprobs this trainer's loss gets; everything from there
(ratios, clipping, KL, the normalisation) is TRL's own code. The pairs:

| TRL loss_type | here |
| --- | --- |
| grpo (each sequence's token mean, averaged) | ppo, length_normalization "trajectory" |
| bnpo (the batch's token mean) | ppo, "token" |
| dr_grpo (sum / (sequences x max_completion_length)) | ppo, "constant" with normalization_tokens = max_completion_length |
| cispo (weight clamped at epsilon_high, token mean) | cispo, "token", eps_low 1 (no lower bound), 1 + eps_high = TRL's epsilon_high |

each with importance sampling per token and per sequence (GSPO), with and without a KL penalty (beta).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from art_server.trainer.grpo import GRPOConfig, chunk_weights, prepare
from art_server.trainer.loss import grpo_token_loss

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)

LENGTHS = [5, 3, 4, 2, 5, 1]  # two groups of three trajectories, completions of these lengths
REWARDS = [[1.0, 0.0, 0.3], [0.2, 0.9, 0.0]]  # no advantage 0 (that trajectory would not train)
MAX_COMPLETION = 6


class Accelerator:
    """The one process TRL's metrics would gather over."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(new: torch.Tensor, old, ref, mask, advantages, *, loss_type, level, eps, beta) -> torch.Tensor:
    from trl import GRPOTrainer

    batch, width = new.shape
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (new, torch.zeros_like(new), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None),
        loss_type=loss_type,
        epsilon_low=eps[0],
        epsilon_high=eps[1],
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_COMPLETION,
        accelerator=Accelerator(),
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list)},
    )
    trainer.args.steps_per_generation = 1
    inputs = {
        "prompt_ids": torch.ones(batch, 2, dtype=torch.long),
        "prompt_mask": torch.ones(batch, 2, dtype=torch.long),
        "completion_ids": torch.ones(batch, width, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": advantages,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(trainer, None, inputs)  # pyright: ignore[reportArgumentType]


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[t < n for t in range(MAX_COMPLETION)] for n in LENGTHS])
    old = -torch.rand(len(LENGTHS), MAX_COMPLETION, generator=g) * 3
    new = old + torch.randn(old.shape, generator=g) * 0.3  # ratios on both sides of the clip range
    ref = old + torch.randn(old.shape, generator=g) * 0.2
    return mask, old * mask, new * mask, ref * mask


def trajectories() -> list[list[dict]]:
    def answer(n: int, reward: float) -> dict:
        turn = {"kind": "choice", "prompt_token_ids": [1, 2], "token_ids": list(range(3, 3 + n)), "logprobs": [-1.0] * n}
        return {"reward": reward, "messages_and_choices": [turn]}

    lengths = iter(LENGTHS)
    return [[answer(next(lengths), r) for r in group] for group in REWARDS]


CASES = [
    ("grpo", "ppo", "trajectory", (0.2, 0.28), (0.2, 0.28)),
    ("bnpo", "ppo", "token", (0.2, 0.28), (0.2, 0.28)),
    ("dr_grpo", "ppo", "constant", (0.2, 0.28), (0.2, 0.28)),
    ("cispo", "cispo", "token", (1.0, 0.3), (0.0, 1.3)),  # here eps (low, high); TRL's epsilon_high is the cap
]


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("beta", [0.0, 0.05])
@pytest.mark.parametrize("trl_type, variant, normalization, eps, trl_eps", CASES, ids=[c[0] for c in CASES])
def test_loss_and_gradients_equal_trls(trl_type, variant, normalization, eps, trl_eps, level, beta):
    mask, old, base, ref = inputs(seed=7)
    config = GRPOConfig(length_normalization=normalization, normalization_tokens=MAX_COMPLETION, importance_sampling=level)
    prepared = prepare(trajectories(), config, 100)
    items = chunk_weights(prepared.items, normalization, MAX_COMPLETION)
    assert [it.sequence.trained_tokens for it in items] == LENGTHS  # one sequence per trajectory, in order
    advantages = torch.tensor([it.advantage for it in items], dtype=torch.float32)

    new_trl = base.clone().requires_grad_(True)
    theirs = trl_loss(new_trl, old, ref, mask, advantages, loss_type=trl_type, level=level, eps=trl_eps, beta=beta)
    theirs.backward()

    new_ours = base.clone().requires_grad_(True)
    rows, cols = mask.nonzero(as_tuple=True)  # row-major: each sequence's tokens in order, as the trainer flattens them
    ours = grpo_token_loss(
        new_ours[rows, cols],
        old[rows, cols],
        advantages[rows],
        torch.tensor([items[r].weight for r in rows.tolist()]),
        rows,
        variant=variant,
        eps_low=eps[0],
        eps_high=eps[1],
        importance_sampling=level,
        ref_lp=ref[rows, cols] if beta else None,
        kl_coef=beta,
    ).loss
    ours.backward()
    assert new_trl.grad is not None and new_ours.grad is not None
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), abs=1e-6)
    assert (new_ours.grad - new_trl.grad).abs().max().item() < 1e-6
    assert new_ours.grad.abs().max().item() > 1e-3  # a real gradient, not two zeros
