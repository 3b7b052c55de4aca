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


def _answer(n: int, reward: float) -> dict:
    return {
        "reward": reward,
        "messages_and_choices": [
            {"kind": "choice", "prompt_token_ids": [1, 2], "token_ids": list(range(3, 3 + n)), "logprobs": [-1.0] * n}
        ],
    }


def test_length_normalization_trajectory_token_and_constant_weigh_tokens_as_published():
    """A 2-token and a 6-token answer in one gradient step. "trajectory" (GRPO): each answer's tokens
    share 1/2, so a short answer's token weighs 3x a long one's; "token" (DAPO): every token 1/8;
    "constant" (Dr. GRPO): every token 1 / (2 trajectories x normalization_tokens), whatever the lengths."""
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare
    from art_server.trainer.grpo_weights import chunk_weights

    prepared = prepare([[_answer(2, 1.0), _answer(6, 0.0)]], GRPOConfig(), 100)

    def weights(mode: str, constant: int = 1024) -> dict[int, float]:
        return {len(it.sequence.input_ids) - 2: it.weight for it in chunk_weights(prepared.items, mode, constant, prepared)}

    assert weights("trajectory") == pytest.approx({2: 1 / 2 / 2, 6: 1 / 6 / 2})
    assert weights("token") == pytest.approx({2: 1 / 8, 6: 1 / 8})
    assert weights("constant", 10) == pytest.approx({2: 1 / 20, 6: 1 / 20})
    # Dr. GRPO's constant does not move with the step's lengths: longer answers, the same weight.
    longer = prepare([[_answer(5, 1.0), _answer(9, 0.0)]], GRPOConfig(), 100)
    assert [it.weight for it in chunk_weights(longer.items, "constant", 10, longer)] == pytest.approx([1 / 20, 1 / 20])
    with pytest.raises(ValueError, match="trajectory, token or constant"):
        chunk_weights(prepared.items, "none", 10, prepared)


def test_dr_grpos_divisor_is_the_batch_whatever_its_share_of_flat_groups_and_zero_advantages():
    """Four groups of four answers of 3 tokens, normalization_tokens 10. With all four groups
    informative, every token of "constant" weighs 1 / (16 trajectories x 10). With one informative
    group and three flat ones (equal rewards: skipped, nothing to train) a token still weighs 1/160:
    the divisor is the batch's 16 trajectories, not the 4 that train (it was 1/40, a 4x larger step).
    Split into 2 gradient steps, each holds half the batch: 1 / (8 x 10)."""
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare
    from art_server.trainer.grpo_weights import chunk_weights, gradient_step_chunks

    informative = [_answer(3, r) for r in (1.0, 0.0, 0.0, 0.5)]
    flat = [_answer(3, 1.0) for _ in range(4)]
    config = GRPOConfig(length_normalization="constant", normalization_tokens=10)

    def token_weights(groups: list[list[dict]], gradient_steps: int = 1) -> set[float]:
        p = prepare(groups, config, 100)
        chunks = gradient_step_chunks(p.items, gradient_steps, 0)
        return {round(it.weight, 12) for c in chunks for it in chunk_weights(c, "constant", 10, p, gradient_steps)}

    assert token_weights([informative] * 4) == {round(1 / 160, 12)}
    assert token_weights([informative, flat, flat, flat]) == {round(1 / 160, 12)}
    assert token_weights([informative, informative, flat, flat], gradient_steps=2) == {round(1 / 80, 12)}
    # Dr. GRPO also removes the division by the group's reward std: by default under "constant" only.
    rewards = [1.0, 0.0, 0.0, 0.5]
    unscaled = [it.advantage for it in prepare([informative], config, 100).items]
    assert unscaled == pytest.approx([r - 0.375 for r in rewards])
    assert [it.advantage for it in prepare([informative], GRPOConfig(), 100).items] == pytest.approx(
        group_advantages(rewards, True)
    )
    scaled = GRPOConfig(length_normalization="constant", scale_rewards=True)
    assert [it.advantage for it in prepare([informative], scaled, 100).items] == pytest.approx(group_advantages(rewards, True))


def test_zero_advantage_answers_count_in_their_groups_divisor_and_train_only_under_a_kl_penalty():
    """Rewards 1, 0, 0.5 (mean 0.5): the third answer's advantage is 0. It trains nothing without a KL
    penalty (no pass), but it is one of the group's 3 answers: "trajectory" weighs each of the others'
    tokens 1 / (its tokens x 3), GRPO's 1/G, and "token" divides by all 9 tokens, DAPO's token mean.
    With kl_coef > 0 it runs, for its KL term."""
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare
    from art_server.trainer.grpo_weights import chunk_weights

    group = [[_answer(2, 1.0), _answer(3, 0.0), _answer(4, 0.5)]]
    p = prepare(group, GRPOConfig(), 100)
    assert [it.sequence.trained_tokens for it in p.items] == [2, 3] and p.trajectories_trained == 2
    assert [it.weight for it in chunk_weights(p.items, "trajectory", 1, p)] == pytest.approx([1 / (2 * 3), 1 / (3 * 3)])
    assert [it.weight for it in chunk_weights(p.items, "token", 1, p)] == pytest.approx([1 / 9, 1 / 9])
    with_kl = prepare(group, GRPOConfig(kl_coef=0.1), 100)
    assert [it.sequence.trained_tokens for it in with_kl.items] == [2, 3, 4] and with_kl.items[2].advantage == 0
    assert [it.weight for it in chunk_weights(with_kl.items, "token", 1, with_kl)] == pytest.approx([1 / 9] * 3)


def test_the_old_name_none_is_refused_with_what_to_say_instead():
    from pydantic import ValidationError

    from art_server.trainer.grpo_config import GRPOConfig as GRPOConfigIn

    with pytest.raises(ValidationError, match=r'now "token".*"constant"'):
        GRPOConfigIn.model_validate({"length_normalization": "none"})
    assert (
        GRPOConfigIn.model_validate({"length_normalization": "constant", "normalization_tokens": 256}).normalization_tokens == 256
    )


def test_gradient_steps_hold_whole_groups_in_an_order_fixed_by_the_step():
    """Advantages are relative within a group, so a gradient step takes all of a group's trajectories;
    the order of groups is shuffled by the step (the same on every rank and retry, another next step)."""
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare
    from art_server.trainer.grpo_weights import gradient_step_chunks

    groups = [[_answer(2 + g, 1.0), _answer(3 + g, 0.0), _answer(4 + g, 0.25)] for g in range(6)]
    items = prepare(groups, GRPOConfig(), 100, step=7).items
    chunks = gradient_step_chunks(items, 4, 7)
    assert len(chunks) == 4 and sorted(len({it.group for it in c}) for c in chunks) == [1, 1, 2, 2]
    for chunk in chunks:
        for g in {it.group for it in chunk}:
            assert sum(it.group == g for it in chunk) == 3
    assert [[it.group for it in c] for c in chunks] == [[it.group for it in c] for c in gradient_step_chunks(items, 4, 7)]
    orders = {tuple(it.group for c in gradient_step_chunks(items, 6, seed) for it in c[:1]) for seed in range(8)}
    assert len(orders) > 1
    assert len(gradient_step_chunks(items, 100, 7)) == 6  # never more gradient steps than groups


def test_sequence_ratios_clip_at_gspo_defaults_and_given_eps_win():
    from art_server.trainer.grpo_config import GRPOConfig

    assert GRPOConfig().clip_range == (0.2, 0.28)
    assert GRPOConfig(importance_sampling="sequence").clip_range == (3e-4, 4e-4)
    assert GRPOConfig(importance_sampling="sequence", eps_low=0.1).clip_range == (0.1, 4e-4)


def test_approx_kl_is_k3_of_kl_from_sampling_to_current_by_hand():
    """Two tokens sampled at logprob log 0.5 now at log 0.25 and log 0.75: r = 0.5 and 1.5, so
    k3 = (r - 1 - log r) = 0.19315 and 0.09453; their weighted sum with weights 1/2 is 0.14384."""
    r = [0.5, 1.5]
    old = torch.tensor([math.log(0.5)] * 2)
    new = torch.tensor([math.log(0.5 * x) for x in r])
    terms = grpo_token_loss(
        new,
        old,
        torch.tensor([1.0, 1.0]),
        torch.tensor([0.5, 0.5]),
        torch.tensor([0, 0]),
        variant="ppo",
        importance_sampling="token",
    )
    expected = sum(0.5 * (x - 1 - math.log(x)) for x in r)
    assert float(terms.approx_kl_policy) == pytest.approx(expected, abs=1e-6) and expected == pytest.approx(0.14384, abs=1e-5)


def test_policy_lag_is_measured_per_trained_token_and_groups_past_max_steps_off_policy_are_skipped():
    """Each sampled turn says the step that sampled it (art_policy_step): a step reports how far behind
    its trained tokens are, and with max_steps_off_policy a group with any turn further behind is
    skipped as "stale" (turns without a step, e.g. hand-built ones, are not measured)."""
    from art_server.trainer.grpo_config import GRPOConfig
    from art_server.trainer.grpo_prepare import prepare

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
