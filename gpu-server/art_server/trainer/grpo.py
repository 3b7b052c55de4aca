"""One GRPO training step: trajectory groups in, an optimizer step (or a few) on one LoRA slot out.

The loop is plain: build sequences, compute advantages per group, then for each gradient step
accumulate the loss over micro-batches, clip the gradient, step the optimizer, and report the
numbers that say whether training is healthy (loss, grad norm, clip fraction, KL, entropy).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .guard import StepGuard
from .logprobs import Batch, pad_batch, token_logprobs
from .lora import LoraHost
from .loss import group_advantages, grpo_token_loss, truncated_is_weights
from .parallel import DistributedSync, LocalSync, accumulate, padded
from .sequences import MissingTokens, Sequence, build_sequences, sampled_turns


@dataclass
class GRPOConfig:
    learning_rate: float = 5e-6
    loss: str = "ppo"  # ppo | cispo
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.0
    scale_rewards: bool = True
    importance_sampling: str = "token"  # token | sequence
    max_grad_norm: float = 1.0
    micro_batch_size: int = 16
    gradient_steps: int = 1
    temperature: float = 1.0
    max_sequence_length: int | None = None
    sampler_correction: str = "tis"  # tis | none (see loss.py)
    sampler_correction_cap: float = 2.0
    length_normalization: str = "trajectory"  # trajectory | none (Dr. GRPO; see prepare)
    kl_ref_step: int | None = None  # the KL penalty's reference: this step's adapter (None: the base model)
    max_steps_off_policy: int | None = None  # groups with a turn sampled further behind are skipped ("stale")


@dataclass
class TrainItem:
    sequence: Sequence
    advantage: float
    weight: float  # per trained token


@dataclass
class Prepared:
    items: list[TrainItem] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> groups
    rewards: list[float] = field(default_factory=list)
    groups: int = 0
    trajectories: int = 0
    trajectories_trained: int = 0
    sequences_split: int = 0
    skip_details: list[str] = field(default_factory=list)
    # (policy lag, tokens) of each trained sampled turn that says its step (art_policy_step)
    lags: list[tuple[int, int]] = field(default_factory=list)

    def lag_metrics(self) -> dict[str, float]:
        """Staleness of the trained tokens: how many steps behind the trained step sampled them."""
        tokens = sum(n for _, n in self.lags)
        if not tokens:
            return {}
        return {
            "policy_lag_min": min(lag for lag, _ in self.lags),
            "policy_lag_max": max(lag for lag, _ in self.lags),
            "policy_lag_mean": sum(lag * n for lag, n in self.lags) / tokens,
        }


SKIP_MESSAGES = {
    "equal_rewards": "all rewards in the group are equal, so every advantage is 0",
    "missing_tokens": "a trajectory has a choice without token ids or logprobs (sample through the server's "
    "OpenAI endpoint, which returns them)",
    "too_long": "a sequence is longer than max_sequence_length",
    "too_small": "the group has fewer than 2 trajectories",
    "stale": "a turn was sampled more than max_steps_off_policy steps before the step that trains it",
}


def _turn_lags(group: list[dict[str, Any]], step: int) -> list[tuple[int, int]]:
    """(steps behind `step`, sampled tokens) of each sampled turn that says which step sampled it."""
    return [
        (step - item["art_policy_step"], len(item.get("token_ids") or []))
        for t in group
        for item in t["messages_and_choices"]
        if item.get("kind") == "choice" and item.get("art_policy_step") is not None
    ]


def prepare(groups: list[list[dict[str, Any]]], config: GRPOConfig, context_length: int, step: int = 0) -> Prepared:
    """Sequences with advantages and weights; groups that cannot train are counted by reason. `step`
    is the step being trained from (its policy lag is measured from it)."""
    out = Prepared(groups=len(groups))
    limit = config.max_sequence_length or context_length
    kept: list[tuple[list[Sequence], float]] = []
    for g, group in enumerate(groups):
        rewards = [float(t["reward"]) for t in group]
        out.rewards.extend(rewards)
        out.trajectories += len(group)
        if len(group) < 2:
            out.skipped["too_small"] += 1
            continue
        if max(rewards) - min(rewards) < 1e-9:
            out.skipped["equal_rewards"] += 1
            continue
        lags = _turn_lags(group, step)
        if config.max_steps_off_policy is not None and any(lag > config.max_steps_off_policy for lag, _ in lags):
            out.skipped["stale"] += 1
            out.skip_details.append(f"group {g}: a turn is {max(lag for lag, _ in lags)} steps behind step {step}")
            continue
        try:
            built = [build_sequences(sampled_turns(t)) for t in group]
        except MissingTokens as error:
            out.skipped["missing_tokens"] += 1
            out.skip_details.append(f"group {g}: {error}")
            continue
        if any(len(s.input_ids) > limit for seqs, _ in built for s in seqs):
            out.skipped["too_long"] += 1
            out.skip_details.append(f"group {g}: a sequence is over {limit} tokens")
            continue
        for (seqs, splits), advantage in zip(built, group_advantages(rewards, config.scale_rewards)):
            if abs(advantage) > 0 and sum(s.trained_tokens for s in seqs):
                kept.append((seqs, advantage))
                out.sequences_split += splits
        out.lags.extend(lags)
    # "trajectory": each trajectory weighs the same, its tokens share its weight (a long answer's
    # tokens count less). "none" (Dr. GRPO): every token weighs the same whatever its answer's length
    # (divided by a constant, not by its own length). train_step rescales each gradient step's
    # weights to sum to 1 either way; Adam is indifferent to that constant.
    longest = max((sum(s.trained_tokens for s in seqs) for seqs, _ in kept), default=1)
    for seqs, advantage in kept:
        tokens = sum(s.trained_tokens for s in seqs) if config.length_normalization == "trajectory" else longest
        for s in seqs:
            out.items.append(TrainItem(s, advantage, 1.0 / tokens / len(kept)))
    out.trajectories_trained = len(kept)
    return out


def nothing_trained_reason(p: Prepared) -> str:
    if not p.groups:
        return "no groups were sent"
    parts = [f"{n} group{'s' if n > 1 else ''}: {SKIP_MESSAGES[r]}" for r, n in p.skipped.items()]
    return "nothing to train: " + ("; ".join(parts) if parts else "no trajectory had a non-zero advantage")


def _chunks(items: list[Any], n: int) -> list[list[Any]]:
    n = max(1, min(n, len(items)))
    size = math.ceil(len(items) / n)
    return [items[i : i + size] for i in range(0, len(items), size)]


def train_step(
    host: LoraHost,
    slot: str,
    optimizer: torch.optim.Optimizer | None,
    prepared: Prepared,
    config: GRPOConfig,
    pad_id: int,
    progress: Callable[[dict[str, Any]], None] | None = None,
    guard: StepGuard | None = None,
    sync: LocalSync | DistributedSync | None = None,
    ref_slot: str | None = None,
) -> dict[str, Any]:
    """Runs the gradient steps; returns summed metrics (the caller adds rewards and timings). `guard`
    stops a cancelled step between micro-batches and refuses non-finite updates (see guard.py); `sync`
    splits the work across trainer ranks (parallel.py; one process by default); `ref_slot` holds the
    adapter of `config.kl_ref_step`, the KL penalty's reference (None: the base model)."""
    guard = guard or StepGuard()
    sync = sync or LocalSync()
    params = host.parameters(slot)
    for group in optimizer.param_groups if optimizer is not None else []:
        group["lr"] = config.learning_rate
    totals = Counter()
    started = time.perf_counter()
    chunks = _chunks(prepared.items, config.gradient_steps)
    # Renormalise so each gradient step averages over the trajectories it holds (on every rank alike).
    scales = [1.0 / sum(it.weight * it.sequence.trained_tokens for it in chunk) for chunk in chunks]
    # This rank's share of each gradient step, with rows of the same prompt side by side: a micro-batch
    # then shares its prompt (run once, see logprobs.py) and holds rows of similar length (little
    # padding). The sum is order-free.
    shares = [
        sorted(sync.shard(chunk, lambda it: len(it.sequence.input_ids)), key=lambda it: it.sequence.input_ids) for chunk in chunks
    ]
    plan = [[share[i : i + config.micro_batch_size] for i in range(0, len(share), config.micro_batch_size)] for share in shares]
    real = [len(micros) for micros in plan]  # the rest, if any, are passes that train nothing, for lockstep ranks
    if sync.lockstep:
        plan = [
            padded(
                micros,
                sync.most_micro_batches(chunk, lambda it: len(it.sequence.input_ids), config.micro_batch_size),
                TrainItem(chunk[0].sequence, 0.0, 0.0),
            )
            for micros, chunk in zip(plan, chunks)
        ]
    # A cancelled step stops between micro-batches; with a sharded base, only where the ranks meet
    # (a rank leaving mid-pass would leave the others waiting for its shard of the weights).
    check = guard.check if not sync.lockstep else (lambda: None)
    behaviour = _trainer_old_logprobs(host, slot, plan, config, pad_id, check)
    start_stats = Counter()  # the first gradient step, before any update
    for k, micros in enumerate(plan):
        stats = Counter()
        for i, micro in enumerate(micros):
            check()
            with host.lock:
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                micro_stats = _micro_step(host, slot, batch, micro, config, scales[k], behaviour.get((k, i)), ref_slot)
            if i < real[k]:
                accumulate(stats, micro_stats)
        guard.check()
        grad_norm, stats = sync.step(
            guard,
            optimizer,
            params,
            config.max_grad_norm,
            stats,
            f"gradient step {k + 1} of {len(plan)}",
            host.lock,
            final=k == len(plan) - 1,
        )
        if k == 0:
            start_stats = stats
        # The weights were renormalised per gradient step, so these sums are its weighted means.
        line = {
            "type": "progress",
            "gradient_step": k + 1,
            "gradient_steps": len(plan),
            "loss": stats["loss"],
            "grad_norm": grad_norm,
            "clip_fraction": stats["clipped"],
            "approx_kl": stats["approx_kl"],
            "kl_ref": stats["kl_ref"],
            "entropy": stats["entropy"] / max(1, stats["tokens"]),
            "lr": config.learning_rate,
            "tokens": int(stats["tokens"]),
        }
        accumulate(totals, {k2: v for k2, v in line.items() if k2 in ("loss", "clip_fraction", "approx_kl", "kl_ref", "tokens")})
        accumulate(totals, {"grad_norm": grad_norm, "entropy": stats["entropy"]})
        if progress:
            progress(line)
    n = len(plan)
    start_tokens = max(1, start_stats["tokens"])
    return {
        "loss": totals["loss"] / n,
        "grad_norm": totals["grad_norm"] / n,
        "clip_fraction": totals["clip_fraction"] / n,
        "approx_kl": totals["approx_kl"] / n,
        "kl_ref": totals["kl_ref"] / n,
        "entropy": totals["entropy"] / max(1, totals["tokens"]),
        "tokens_trained": int(totals["tokens"]),
        "gradient_steps": n,
        "forward_backward_s": time.perf_counter() - started,
        # How exactly the trainer sees what the sampler sampled, before the step's first update.
        "sampler_logprob_diff_mean": start_stats["sampler_diff"] / start_tokens,
        "sampler_logprob_diff_max": start_stats["sampler_diff_max"],
        "importance_ratio_mean": start_stats["ratio"] / start_tokens,
        "importance_ratio_max": start_stats["ratio_max"],
        "sampler_weight_mean": start_stats["sampler_weight"] / start_tokens,
    }


def _trainer_old_logprobs(
    host: LoraHost, slot: str, plan: list[list[list[TrainItem]]], config: GRPOConfig, pad_id: int, check: Callable[[], None]
) -> dict[tuple[int, int], torch.Tensor]:
    """With the sampler correction on, the trainer's own logprobs of every micro-batch before the
    step's first update, for the gradient steps after the first (the first computes them in its own
    forward pass: nothing has changed yet). Keyed by (gradient step, micro-batch)."""
    out: dict[tuple[int, int], torch.Tensor] = {}
    if config.sampler_correction != "tis":
        return out
    for k, micros in enumerate(plan[1:], start=1):
        for i, micro in enumerate(micros):
            check()
            with host.lock, torch.no_grad():
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                out[(k, i)] = token_logprobs(host.model, batch, config.temperature)[0]
    return out


def _micro_step(
    host: LoraHost,
    slot: str,
    batch: Batch,
    micro: list[TrainItem],
    config: GRPOConfig,
    weight_scale: float,
    trainer_old: torch.Tensor | None,
    ref_slot: str | None,
) -> Counter:
    model = host.model
    ref = None
    if config.kl_coef:  # the reference first, then the policy's pass with `slot` active again
        with torch.no_grad(), host.using(ref_slot) if ref_slot else host.base_only():
            ref, _ = token_logprobs(model, batch, config.temperature)
        host.activate(slot)
    # Per-token tensors in the same flat order as token_logprobs returns them.
    seq_index = batch.token_rows
    sampler = batch.old_logprobs()
    advantages = torch.tensor([it.advantage for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    weights = torch.tensor([it.weight * weight_scale for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    new, entropy = token_logprobs(model, batch, config.temperature, with_entropy=True)
    assert entropy is not None  # with_entropy=True
    old, sampler_weights = sampler, None
    if config.sampler_correction == "tis":
        old = new.detach() if trainer_old is None else trainer_old
        sampler_weights = truncated_is_weights(old, sampler, config.sampler_correction_cap)
    terms = grpo_token_loss(
        new,
        old,
        advantages,
        weights,
        seq_index,
        variant=config.loss,
        eps_low=config.eps_low,
        eps_high=config.eps_high,
        importance_sampling=config.importance_sampling,
        ref_lp=ref,
        kl_coef=config.kl_coef,
        sampler_lp=sampler,
        sampler_weights=sampler_weights,
    )
    terms.loss.backward()
    diff = (new.detach() - sampler).abs()
    any_tokens = diff.numel() > 0
    return Counter(
        {
            "loss": float(terms.loss.detach()),
            "clipped": float(terms.clipped),
            "approx_kl": float(terms.approx_kl_policy),
            "kl_ref": float(terms.kl_ref),
            "entropy": float(entropy.sum()),
            "tokens": int(new.numel()),
            "sampler_diff": float(diff.sum()),
            "sampler_diff_max": float(diff.max()) if any_tokens else 0.0,
            "ratio": float(terms.ratio.sum()),
            "ratio_max": float(terms.ratio.max()) if any_tokens else 0.0,
            "sampler_weight": float(sampler_weights.sum()) if sampler_weights is not None else float(new.numel()),
        }
    )
