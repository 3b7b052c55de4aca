"""The GRPO objective, written as its equations.

For a group of G trajectories with rewards r_1..r_G:

    A_i = r_i - mean(r)                      (advantage)
    A_i = A_i / (std(r) + 1e-6)              (when scale_rewards)

For each sampled assistant token t of trajectory i, with the logprob it was sampled with (old)
and the current policy's logprob (new):

    ratio_t = exp(new_t - old_t)                                  (importance_sampling="token")
    ratio_i = exp(mean_t(new_t - old_t)), the same for each t     (importance_sampling="sequence")

    ppo:   loss_t = -min(ratio_t * A_i, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_i)
    cispo: loss_t = -sg(clip(ratio_t, 1 - eps_low, 1 + eps_high)) * A_i * new_t

    kl_t = exp(ref_t - new_t) - (ref_t - new_t) - 1               (k3, against the base or kl_ref_step's adapter)
    loss_t += kl_coef * kl_t

On tokens the current policy sampled, kl_t's mean estimates KL(pi_theta || pi_ref) (GRPO's penalty);
its gradient, as a loss on those tokens (their sampling not differentiated), is that of
KL(pi_ref || pi_theta) in expectation, the known property of k3 used as a loss (as in DeepSeek's GRPO).
The reported approx_kl is k3 of KL(sampling || current): r_t - 1 - log r_t with r_t = exp(new_t - old_t).

The sampler (vLLM's kernels, bf16) does not score tokens exactly as the trainer does, so with
sampler_correction="tis" (truncated importance sampling) `old` is the trainer's own logprob before
the step's first update, and the policy term is weighted by how much likelier the trainer finds the
token than the sampler did, truncated so one token cannot dominate:

    w_t = min(exp(trainer_old_t - sampler_t), cap)                (loss_t's policy term times w_t)

Then the ratio starts at exactly 1 whatever the sampler's precision, and the mismatch (or a sampler
that ran an older step) is corrected by w_t instead of being clipped as if the policy had moved.

The loss is the weighted sum of loss_t over a gradient step's tokens; the weights are the length
normalisation (grpo_weights.chunk_weights): a mean over trajectories of their token means ("trajectory"), a
mean over tokens ("token", DAPO's), or a constant ("constant", Dr. GRPO's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def group_advantages(rewards: list[float], scale_rewards: bool) -> list[float]:
    r = torch.tensor(rewards, dtype=torch.float64)
    a = r - r.mean()
    if scale_rewards:
        a = a / (r.std(unbiased=False) + 1e-6)
    return a.tolist()


@dataclass
class LossTerms:
    loss: torch.Tensor  # scalar: the sum over tokens of weight * loss_t (divide nothing more)
    clipped: torch.Tensor  # tokens whose ratio was clipped (count, weighted like the loss)
    approx_kl_policy: torch.Tensor  # k3 between sampling and current policy, weighted
    kl_ref: torch.Tensor  # k3 to the reference (the base, or kl_ref_step's adapter), weighted (0 without one)
    ratio: torch.Tensor  # per token, the importance ratio the loss used (detached)


def truncated_is_weights(trainer_old: torch.Tensor, sampler: torch.Tensor, cap: float) -> torch.Tensor:
    """w_t = min(exp(trainer_old_t - sampler_t), cap): corrects for a sampler that scores differently."""
    return torch.exp(trainer_old - sampler).clamp(max=cap)


def grpo_token_loss(
    new_lp: torch.Tensor,
    old_lp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    seq_index: torch.Tensor,
    *,
    variant: str = "ppo",
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    importance_sampling: str = "token",
    ref_lp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    sampler_lp: torch.Tensor | None = None,
    sampler_weights: torch.Tensor | None = None,
) -> LossTerms:
    """All tensors are flat over the trained tokens of a micro-batch: `advantages` holds each
    token's trajectory advantage, `weights` its weight, `seq_index` which sequence it belongs to.
    `old_lp` are the logprobs the ratio is taken against; `sampler_lp` (when they differ from
    `old_lp`) the sampler's, for the KL metric; `sampler_weights` the truncated IS weights."""
    log_ratio = new_lp - old_lp
    if importance_sampling == "sequence":
        n_seq = int(seq_index.max().item()) + 1 if seq_index.numel() else 0
        sums = torch.zeros(n_seq, dtype=log_ratio.dtype, device=log_ratio.device).index_add(0, seq_index, log_ratio)
        counts = torch.zeros(n_seq, dtype=log_ratio.dtype, device=log_ratio.device).index_add(
            0, seq_index, torch.ones_like(log_ratio)
        )
        log_ratio = (sums / counts.clamp(min=1))[seq_index]
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    if variant == "ppo":
        per_token = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
    elif variant == "cispo":
        per_token = -clipped_ratio.detach() * advantages * new_lp
    else:
        raise ValueError(f"unknown loss variant {variant!r} (ppo or cispo)")
    if sampler_weights is not None:
        per_token = sampler_weights * per_token
    kl_ref = torch.zeros((), device=new_lp.device)
    if ref_lp is not None and kl_coef:
        d = ref_lp - new_lp
        kl_t = torch.exp(d) - d - 1
        per_token = per_token + kl_coef * kl_t
        kl_ref = (weights * kl_t).sum().detach()
    with torch.no_grad():
        clipped = (weights * ((ratio < 1 - eps_low) | (ratio > 1 + eps_high)).to(weights.dtype)).sum()
        # k3 of KL(sampling || current) over tokens drawn by the sampling policy: with r = new / old,
        # r - 1 - log r (unbiased, never negative; Schulman's estimator).
        log_r = new_lp - (old_lp if sampler_lp is None else sampler_lp)
        approx_kl = (weights * (torch.exp(log_r) - 1 - log_r)).sum()
    return LossTerms((weights * per_token).sum(), clipped, approx_kl, kl_ref, ratio.detach())
