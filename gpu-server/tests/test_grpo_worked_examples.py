"""The GRPO objective on one small example worked out by hand: the expected numbers are written here,
not computed by the code under test.

The example: a group of 3 trajectories with rewards 1, 0, 0. Mean 1/3, population std sqrt(2)/3,
so the advantages are sqrt(2) = 1.4142136 and -1/sqrt(2) = -0.7071068 (twice); unscaled (Dr. GRPO)
2/3, -1/3, -1/3. Trajectory A has 2 trained tokens, B and C one each: 4 tokens, in that order.
Every token was sampled at probability 0.5 (logprob log 0.5); the policy now gives them 0.75, 0.45,
0.35 and 0.55, so the ratios are r = 1.5, 0.9, 0.7, 1.1. With length normalisation "trajectory" each
trajectory weighs 1/3, shared by its tokens: w = 1/6, 1/6, 1/3, 1/3.

With eps_low 0.2, eps_high 0.28 the clip range is [0.8, 1.28]:
- token 1 (A > 0, r 1.5 > 1.28): ppo takes the clipped 1.28 x 1.4142136 = 1.8101934, no gradient;
- token 2 (A > 0, r 0.9 inside): -0.9 x 1.4142136 = -1.2727922; d/dlogp = -r A = -1.2727922;
- token 3 (A < 0, r 0.7 < 0.8): min(0.7 A, 0.8 A) = 0.8 A, so 0.5656854, no gradient;
- token 4 (A < 0, r 1.1 inside): 1.1 x 0.7071068 = 0.7778175; d/dlogp = -r A = 0.7778175.
Loss = (1.8101934 x -1 - 1.2727922) / 6 + (0.5656854 + 0.7778175) / 3 = -0.0659966.
"""

from __future__ import annotations

import math

import pytest
import torch

from art_server.trainer.grpo_config import GRPOConfig
from art_server.trainer.grpo_prepare import prepare
from art_server.trainer.grpo_weights import chunk_weights
from art_server.trainer.loss import LossTerms, group_advantages, grpo_token_loss, truncated_is_weights

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)

SCALED = [math.sqrt(2)] * 2 + [-1 / math.sqrt(2)] * 2  # per token: A's advantage twice, then B's and C's
OLD = [math.log(0.5)] * 4
RATIOS = [1.5, 0.9, 0.7, 1.1]
SEQ = torch.tensor([0, 0, 1, 2])
WEIGHTS = [1 / 6, 1 / 6, 1 / 3, 1 / 3]


def loss_and_grad(
    *, variant="ppo", level="token", eps=(0.2, 0.28), advantages=SCALED, weights=WEIGHTS, **extra
) -> tuple[float, list[float], LossTerms]:
    new = torch.tensor([math.log(0.5 * r) for r in RATIOS], dtype=torch.float64, requires_grad=True)
    terms = grpo_token_loss(
        new,
        torch.tensor(OLD, dtype=torch.float64),
        torch.tensor(advantages, dtype=torch.float64),
        torch.tensor(weights, dtype=torch.float64),
        SEQ,
        variant=variant,
        eps_low=eps[0],
        eps_high=eps[1],
        importance_sampling=level,
        **extra,
    )
    terms.loss.backward()
    assert new.grad is not None
    return float(terms.loss.detach()), new.grad.tolist(), terms


def test_the_advantages_and_the_weights_of_the_example():
    # (the std gets 1e-6 added, so sqrt(2) x (sqrt(2)/3) / (sqrt(2)/3 + 1e-6) = 1.4142106)
    assert group_advantages([1.0, 0.0, 0.0], True) == pytest.approx([1.4142106, -0.7071053, -0.7071053], abs=1e-6)
    assert group_advantages([1.0, 0.0, 0.0], False) == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-12)

    def answer(n: int, reward: float) -> dict:
        turn = {"kind": "choice", "prompt_token_ids": [1, 2], "token_ids": list(range(3, 3 + n)), "logprobs": [-0.7] * n}
        return {"reward": reward, "messages_and_choices": [turn]}

    prepared = prepare([[answer(2, 1.0), answer(1, 0.0), answer(1, 0.0)]], GRPOConfig(), 100)

    def per_token(mode: str, constant: int = 1) -> list[float]:
        weighted = chunk_weights(prepared.items, mode, constant, prepared)
        return [it.weight for it in weighted for _ in range(it.sequence.trained_tokens)]

    assert per_token("trajectory") == pytest.approx(WEIGHTS)
    assert per_token("token") == pytest.approx([1 / 4] * 4)
    assert per_token("constant", 4) == pytest.approx([1 / 12] * 4)  # 1 / (3 trajectories x 4)
    # Dr. GRPO's advantages are unscaled by default (its published form): 2/3, -1/3, -1/3.
    dr = prepare([[answer(2, 1.0), answer(1, 0.0), answer(1, 0.0)]], GRPOConfig(length_normalization="constant"), 100)
    assert [it.advantage for it in dr.items] == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-12)


def test_ppo_per_token():
    loss, grad, terms = loss_and_grad()
    assert loss == pytest.approx(-0.0659966, abs=1e-6)
    # d loss / d logp = w x (-r A) where unclipped: token 2: -1.2727922 / 6, token 4: 0.7778175 / 3.
    assert grad == pytest.approx([0.0, -0.2121320, 0.0, 0.2592725], abs=1e-6)
    assert float(terms.clipped) == pytest.approx(1 / 6 + 1 / 3)  # tokens 1 and 3, by weight


def test_cispo_keeps_a_gradient_on_clipped_tokens():
    """cispo: loss_t = -sg(clip(r)) A logp: the value uses logp = log(0.5 r) (-0.2876821, -0.7985077,
    -1.0498221, -0.5978370); the gradient is -w clip(r) A on every token:
    -1.28 x 1.4142136 / 6 = -0.3016989, -0.9 x 1.4142136 / 6 = -0.2121320,
    0.8 x 0.7071068 / 3 = 0.1885618, 1.1 x 0.7071068 / 3 = 0.2592725."""
    loss, grad, _ = loss_and_grad(variant="cispo")
    # -(1/6)(1.28)(1.4142136)(-0.2876821) - (1/6)(0.9)(1.4142136)(-0.7985077)
    #   + (1/3)(0.8)(0.7071068)(-1.0498221) + (1/3)(1.1)(0.7071068)(-0.5978370) = -0.0967766
    assert loss == pytest.approx(-0.0967766, abs=1e-6)
    assert grad == pytest.approx([-0.3016989, -0.2121320, 0.1885618, 0.2592725], abs=1e-6)


def test_sequence_importance_sampling_gives_a_trajectory_one_ratio():
    """GSPO: A's ratio is exp(mean(log 1.5, log 0.9)) = sqrt(1.35) = 1.1618950, inside [0.8, 1.28], for
    both its tokens: each -1.1618950 x 1.4142136 = -1.6431669. Both terms move with each of A's logps
    (d r / d logp_t = r / 2): d/dlogp_t = 2 x (1/6) x (-r A / 2) = -0.2738613. B and C have one token
    each: as per token."""
    loss, grad, _ = loss_and_grad(level="sequence")
    assert loss == pytest.approx(2 * -1.6431669 / 6 + (0.5656854 + 0.7778175) / 3, abs=1e-6)
    assert loss == pytest.approx(-0.0998883, abs=1e-6)
    assert grad == pytest.approx([-0.2738613, -0.2738613, 0.0, 0.2592725], abs=1e-6)


def test_sequence_ratios_at_gspo_clip_range():
    """GSPO's defaults [1 - 3e-4, 1 + 4e-4]: A (1.1618950, A > 0) is clipped to 1.0004 and B (0.7, A < 0)
    to 0.9997, so neither has a gradient; C (1.1, A < 0) is not clipped (ppo's pessimism keeps r A
    when it is the lower): 1.0004 x -1.4142136 / 3 + 0.9997 x 0.7071068 / 3 + 0.7778175 / 3 = 0.0233110."""
    loss, grad, _ = loss_and_grad(level="sequence", eps=GRPOConfig(importance_sampling="sequence").clip_range)
    assert loss == pytest.approx(0.0233110, abs=1e-6)
    assert grad == pytest.approx([0.0, 0.0, 0.0, 0.2592725], abs=1e-6)


def test_truncated_importance_sampling_weights_the_policy_term():
    """The sampler found token 1 three times less likely than the trainer (weight min(3, cap 2) = 2)
    and token 3 e^0.5 times less likely (weight 1.6487213); tokens 2 and 4 agree (1). The loss is the
    per-token ppo terms times these: (-1.8101934 x 2 - 1.2727922) / 6 + (0.5656854 x 1.6487213 +
    0.7778175) / 3 = -0.2453715; the gradients of the unclipped tokens 2 and 4 are unchanged."""
    trainer_old = torch.tensor(OLD, dtype=torch.float64)
    sampler = trainer_old - torch.tensor([math.log(3), 0.0, 0.5, 0.0], dtype=torch.float64)
    weights = truncated_is_weights(trainer_old, sampler, 2.0)
    assert weights.tolist() == pytest.approx([2.0, 1.0, 1.6487213, 1.0], abs=1e-6)
    loss, grad, _ = loss_and_grad(sampler_weights=weights, sampler_lp=sampler)
    assert loss == pytest.approx(-0.2453715, abs=1e-6)
    assert grad == pytest.approx([0.0, -0.2121320, 0.0, 0.2592725], abs=1e-6)


def test_dr_grpo_as_published():
    """Unscaled advantages 2/3, -1/3 and the constant normaliser 1 / (3 x 4): (-1.28 x 2/3 - 0.9 x 2/3
    + 0.8 / 3 + 1.1 / 3) / 12 = -0.82 / 12 = -0.0683333; gradients -0.9 x 2/3 / 12 = -0.05 and
    1.1 / 3 / 12 = 0.0305556."""
    advantages = [2 / 3] * 2 + [-1 / 3] * 2
    loss, grad, _ = loss_and_grad(advantages=advantages, weights=[1 / 12] * 4)
    assert loss == pytest.approx(-0.0683333, abs=1e-6)
    assert grad == pytest.approx([0.0, -0.05, 0.0, 0.0305556], abs=1e-6)


def test_the_kl_penalty_to_a_reference():
    """The reference gives token 2 probability 0.9 (twice the policy's 0.45), the others the policy's own:
    kl_t = e^(ref - new) - (ref - new) - 1 = 2 - log 2 - 1 = 0.3068528 for token 2, 0 elsewhere. With
    kl_coef 0.1 the loss grows by 0.1 x 0.3068528 / 6 = 0.0051142 and token 2's gradient by
    0.1 x (1 - e^(ref - new)) / 6 = -0.0166667; the reported kl_ref is 0.3068528 / 6 = 0.0511421."""
    ref = torch.tensor([math.log(0.5 * r) for r in RATIOS], dtype=torch.float64)
    ref[1] = math.log(0.9)
    loss, grad, terms = loss_and_grad(ref_lp=ref, kl_coef=0.1)
    assert loss == pytest.approx(-0.0659966 + 0.0051142, abs=1e-6)
    assert grad == pytest.approx([0.0, -0.2121320 - 0.0166667, 0.0, 0.2592725], abs=1e-6)
    assert float(terms.kl_ref) == pytest.approx(0.0511421, abs=1e-6)


def test_approx_kl_is_k3_of_kl_from_the_sampling_policy_to_the_current_one():
    """k3 = r - 1 - log r per token: 0.0945349, 0.0053605, 0.0566749, 0.0046898; weighted by w:
    (0.0945349 + 0.0053605) / 6 + (0.0566749 + 0.0046898) / 3 = 0.0371042."""
    _, _, terms = loss_and_grad()
    assert [r - 1 - math.log(r) for r in RATIOS] == pytest.approx([0.0945349, 0.0053605, 0.0566749, 0.0046898], abs=1e-6)
    assert float(terms.approx_kl_policy) == pytest.approx(0.0371042, abs=1e-6)
