"""The GRPO loss and the sequence rebuild, against direct reference computations."""

from __future__ import annotations

# pyright: reportAttributeAccessIssue=false, reportArgumentType=false
# (the reference loss sums Python numbers and tensors, and reads .grad after backward)
import math

import pytest
import torch

from art_server.trainer.loss import group_advantages, grpo_token_loss, truncated_is_weights
from art_server.trainer.sequences import SampledTurn, build_sequences

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)


def reference_loss(new, old, adv, w, seq, variant, eps_low, eps_high, level, ref=None, kl_coef=0.0):
    """The objective token by token, in plain Python over tensors' items where possible."""
    total = 0.0
    terms = []
    for t in range(len(new)):
        if level == "sequence":
            members = [k for k in range(len(new)) if seq[k] == seq[t]]
            log_ratio = sum(new[k] - old[k] for k in members) / len(members)
        else:
            log_ratio = new[t] - old[t]
        ratio = torch.exp(log_ratio)
        clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
        if variant == "ppo":
            term = -torch.minimum(ratio * adv[t], clipped * adv[t])
        else:
            term = -clipped.detach() * adv[t] * new[t]
        if ref is not None:
            d = ref[t] - new[t]
            term = term + kl_coef * (torch.exp(d) - d - 1)
        terms.append(w[t] * term)
    total = sum(terms)
    return total


@pytest.mark.parametrize("variant", ["ppo", "cispo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("kl", [0.0, 0.1])
def test_loss_and_gradient_match_the_reference(variant, level, kl):
    g = torch.Generator().manual_seed(0)
    n = 12
    old = -torch.rand(n, generator=g, dtype=torch.float64) * 3
    base = old + torch.randn(n, generator=g, dtype=torch.float64) * 0.4  # ratios on both sides of the clip range
    seq = torch.tensor([0] * 5 + [1] * 4 + [2] * 3)
    adv = torch.tensor([1.2] * 5 + [-0.7] * 4 + [0.3] * 3, dtype=torch.float64)
    w = torch.tensor([1 / 5 / 3] * 5 + [1 / 4 / 3] * 4 + [1 / 3 / 3] * 3, dtype=torch.float64)
    ref = old + 0.1 if kl else None
    new_a = base.clone().requires_grad_(True)
    new_b = base.clone().requires_grad_(True)
    got = grpo_token_loss(
        new_a, old, adv, w, seq, variant=variant, eps_low=0.2, eps_high=0.28, importance_sampling=level, ref_lp=ref, kl_coef=kl
    )
    want = reference_loss(new_b, old, adv, w, seq, variant, 0.2, 0.28, level, ref, kl)
    got.loss.backward()
    want.backward()
    assert math.isclose(got.loss.item(), want.item(), rel_tol=1e-9, abs_tol=1e-12)
    assert torch.allclose(new_a.grad, new_b.grad, atol=1e-12)


@pytest.mark.parametrize("variant", ["ppo", "cispo"])
def test_truncated_importance_sampling_weights_each_tokens_policy_term_and_caps_it(variant):
    """TIS: the ratio against the trainer's own logprobs (1 before an update), each token's policy term
    times min(exp(trainer - sampler), cap); the KL metric still measures the distance to the sampler."""
    g = torch.Generator().manual_seed(1)
    n = 10
    trainer = -torch.rand(n, generator=g, dtype=torch.float64) * 3
    sampler = trainer + torch.randn(n, generator=g, dtype=torch.float64) * 0.8  # a sampler that scores differently
    seq = torch.tensor([0] * 6 + [1] * 4)
    adv = torch.tensor([0.9] * 6 + [-1.1] * 4, dtype=torch.float64)
    w = torch.tensor([1 / 6 / 2] * 6 + [1 / 4 / 2] * 4, dtype=torch.float64)
    weights = truncated_is_weights(trainer, sampler, 2.0)
    assert torch.allclose(weights, torch.minimum(torch.exp(trainer - sampler), torch.tensor(2.0, dtype=torch.float64)))
    assert weights.max() == 2.0 and weights.min() < 1  # some truncated, some below 1
    new_a = trainer.clone().requires_grad_(True)
    new_b = trainer.clone().requires_grad_(True)
    got = grpo_token_loss(new_a, trainer, adv, w, seq, variant=variant, sampler_lp=sampler, sampler_weights=weights)
    want = reference_loss(new_b, trainer, adv, w * weights, seq, variant, 0.2, 0.28, "token")
    got.loss.backward()
    want.backward()
    assert math.isclose(got.loss.item(), want.item(), rel_tol=1e-9, abs_tol=1e-12)
    assert torch.allclose(new_a.grad, new_b.grad, atol=1e-12)
    assert torch.equal(got.ratio, torch.ones(n, dtype=torch.float64)) and got.clipped.item() == 0
    plain = grpo_token_loss(trainer.clone(), sampler, adv, w, seq, variant=variant)
    assert plain.clipped.item() > 0.3  # without the correction the mismatch alone is clipped as if the policy moved
    assert math.isclose(got.approx_kl_policy.item(), plain.approx_kl_policy.item(), rel_tol=1e-12)


def test_on_policy_ppo_gradient_is_the_policy_gradient():
    """At ratio 1 the clipped objective's gradient is -A * w per token (REINFORCE with a baseline)."""
    lp = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([0.5, 0.5, -1.0], dtype=torch.float64)
    w = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    terms = grpo_token_loss(lp, lp.detach(), adv, w, torch.tensor([0, 0, 1]))
    terms.loss.backward()
    assert torch.allclose(lp.grad, -adv * w)
    assert terms.clipped.item() == 0


def test_advantages_center_and_scale_per_group():
    assert group_advantages([1.0, 0.0, 0.0, 1.0], scale_rewards=False) == [0.5, -0.5, -0.5, 0.5]
    scaled = group_advantages([1.0, 0.0, 0.0, 1.0], scale_rewards=True)
    assert all(math.isclose(abs(a), 1.0, rel_tol=1e-5) for a in scaled)
    assert group_advantages([0.3, 0.3], scale_rewards=True) == [0.0, 0.0]


def test_append_only_turns_share_one_sequence_and_only_sampled_tokens_train():
    t1 = SampledTurn([1, 2, 3], [10, 11], [-0.1, -0.2])
    t2 = SampledTurn([1, 2, 3, 10, 11, 4, 5], [12], [-0.3])
    seqs, splits = build_sequences([t1, t2])
    assert splits == 0 and len(seqs) == 1
    s = seqs[0]
    assert s.input_ids == [1, 2, 3, 10, 11, 4, 5, 12]
    assert s.trained == [False, False, False, True, True, False, False, True]
    assert s.old_logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, -0.3]


def test_a_history_that_was_rewritten_splits_into_separate_sequences():
    t1 = SampledTurn([1, 2, 3], [10, 11], [-0.1, -0.2])
    t2 = SampledTurn([1, 2, 3, 99, 4], [12], [-0.3])  # turn 1 re-tokenised differently
    seqs, splits = build_sequences([t1, t2])
    assert splits == 1 and [s.input_ids for s in seqs] == [[1, 2, 3, 10, 11], [1, 2, 3, 99, 4, 12]]
    assert [s.trained_tokens for s in seqs] == [2, 1]


def test_length_normalization_none_weighs_every_token_alike_trajectory_weighs_every_answer_alike():
    """Dr. GRPO's fix for the length bias: with "trajectory" a 2-token answer's tokens weigh 3x a
    6-token answer's; with "none" all weigh the same (both sum to 1 over the step's tokens after
    train_step's rescaling, so only the relative weights differ)."""
    from art_server.trainer.grpo import GRPOConfig, prepare

    def trajectory(n: int, reward: float) -> dict:
        return {
            "reward": reward,
            "messages_and_choices": [
                {"kind": "choice", "prompt_token_ids": [1, 2], "token_ids": list(range(3, 3 + n)), "logprobs": [-1.0] * n}
            ],
        }

    group = [trajectory(2, 1.0), trajectory(6, 0.0)]
    per_answer = {len(it.sequence.input_ids) - 2: it.weight for it in prepare([group], GRPOConfig(), 100).items}
    per_token = {
        len(it.sequence.input_ids) - 2: it.weight for it in prepare([group], GRPOConfig(length_normalization="none"), 100).items
    }
    assert per_answer == pytest.approx({2: 1 / 2 / 2, 6: 1 / 6 / 2})
    assert per_token == pytest.approx({2: 1 / 6 / 2, 6: 1 / 6 / 2})


def test_policy_lag_is_measured_per_trained_token_and_groups_past_max_steps_off_policy_are_skipped():
    """Each sampled turn says the step that sampled it (art_policy_step): a step reports how far behind
    its trained tokens are, and with max_steps_off_policy a group with any turn further behind is
    skipped as "stale" (turns without a step, e.g. hand-built ones, are not measured)."""
    from art_server.trainer.grpo import GRPOConfig, prepare

    def turn(n: int, step: int | None) -> dict:
        return {
            "kind": "choice",
            "prompt_token_ids": [1, 2],
            "token_ids": list(range(3, 3 + n)),
            "logprobs": [-1.0] * n,
            **({"art_policy_step": step} if step is not None else {}),
        }

    fresh = [
        {"reward": 1.0, "messages_and_choices": [turn(2, 5), turn(2, 4)]},
        {"reward": 0.0, "messages_and_choices": [turn(4, 5), turn(1, None)]},
    ]
    old = [{"reward": 1.0, "messages_and_choices": [turn(3, 2)]}, {"reward": 0.0, "messages_and_choices": [turn(3, 5)]}]
    p = prepare([fresh, old], GRPOConfig(), 100, step=5)
    assert not p.skipped and p.lag_metrics() == pytest.approx(
        {"policy_lag_min": 0, "policy_lag_max": 3, "policy_lag_mean": (0 * 2 + 1 * 2 + 0 * 4 + 3 * 3 + 0 * 3) / 14}
    )
    bounded = prepare([fresh, old], GRPOConfig(max_steps_off_policy=1), 100, step=5)
    assert bounded.skipped == {"stale": 1} and "3 steps behind step 5" in bounded.skip_details[0]
    assert bounded.lag_metrics() == pytest.approx({"policy_lag_min": 0, "policy_lag_max": 1, "policy_lag_mean": 2 / 8})
    assert prepare([old], GRPOConfig(max_steps_off_policy=3), 100, step=5).skipped == {}
