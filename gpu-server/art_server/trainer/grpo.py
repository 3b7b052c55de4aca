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

from .logprobs import Batch, pad_batch, token_logprobs
from .guard import StepGuard
from .lora import LoraHost
from .loss import grpo_token_loss, group_advantages
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


SKIP_MESSAGES = {
    "equal_rewards": "all rewards in the group are equal, so every advantage is 0",
    "missing_tokens": "a trajectory has a choice without token ids or logprobs (sample through the server's "
                      "OpenAI endpoint, which returns them)",
    "too_long": "a sequence is longer than max_sequence_length",
    "too_small": "the group has fewer than 2 trajectories",
}


def prepare(groups: list[list[dict[str, Any]]], config: GRPOConfig, context_length: int) -> Prepared:
    """Sequences with advantages and weights; groups that cannot train are counted by reason."""
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
    # Each trajectory weighs the same; its tokens share its weight.
    for seqs, advantage in kept:
        tokens = sum(s.trained_tokens for s in seqs)
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
    return [items[i:i + size] for i in range(0, len(items), size)]


def train_step(host: LoraHost, slot: str, optimizer: torch.optim.Optimizer, prepared: Prepared, config: GRPOConfig,
               pad_id: int, progress: Callable[[dict[str, Any]], None] | None = None,
               guard: StepGuard | None = None) -> dict[str, Any]:
    """Runs the gradient steps; returns summed metrics (the caller adds rewards and timings). `guard`
    stops a cancelled step between micro-batches and refuses non-finite updates (see guard.py)."""
    guard = guard or StepGuard()
    params = host.parameters(slot)
    for group in optimizer.param_groups:
        group["lr"] = config.learning_rate
    totals = Counter()
    sampler_max = 0.0
    started = time.perf_counter()
    chunks = _chunks(prepared.items, config.gradient_steps)
    for k, chunk in enumerate(chunks):
        # Rows with the same prompt side by side: a micro-batch then shares its prompt (run once, see
        # logprobs.py) and holds rows of similar length (little padding). The sum is order-free.
        chunk = sorted(chunk, key=lambda it: it.sequence.input_ids)
        # Renormalise so each gradient step averages over the trajectories it holds.
        weight_scale = 1.0 / sum(it.weight * it.sequence.trained_tokens for it in chunk)
        stats = Counter()
        for start in range(0, len(chunk), config.micro_batch_size):
            micro = chunk[start:start + config.micro_batch_size]
            guard.check()
            with host.lock:
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                micro_stats = _micro_step(host, batch, micro, config, weight_scale)
            sampler_max = max(sampler_max, micro_stats.pop("sampler_diff_max")) if k == 0 else sampler_max
            stats.update(micro_stats)  # update, not +=: a Counter's += drops negative sums (a loss can be < 0)
        with host.lock:
            grad_norm = guard.apply(optimizer, params, config.max_grad_norm, stats["loss"] / weight_scale,
                                    f"gradient step {k + 1} of {len(chunks)}")
        line = {
            "type": "progress", "gradient_step": k + 1, "gradient_steps": len(chunks),
            "loss": stats["loss"] / weight_scale, "grad_norm": grad_norm,
            "clip_fraction": stats["clipped"] / weight_scale, "approx_kl": stats["approx_kl"] / weight_scale,
            "kl_ref": stats["kl_ref"] / weight_scale, "entropy": stats["entropy"] / max(1, stats["tokens"]),
            "lr": config.learning_rate, "tokens": int(stats["tokens"]),
        }
        if k == 0:  # before any update: how far the trainer's logprobs are from the sampler's
            sampler_mean = stats["sampler_diff"] / max(1, stats["tokens"])
        totals.update({k2: v for k2, v in line.items() if k2 in ("loss", "clip_fraction", "approx_kl", "kl_ref", "tokens")})
        totals["grad_norm"] += grad_norm
        totals["entropy"] += stats["entropy"]
        if progress:
            progress(line)
    n = len(chunks)
    return {
        "loss": totals["loss"] / n, "grad_norm": totals["grad_norm"] / n, "clip_fraction": totals["clip_fraction"] / n,
        "approx_kl": totals["approx_kl"] / n, "kl_ref": totals["kl_ref"] / n,
        "entropy": totals["entropy"] / max(1, totals["tokens"]), "tokens_trained": int(totals["tokens"]),
        "gradient_steps": n, "forward_backward_s": time.perf_counter() - started,
        "sampler_logprob_diff_mean": sampler_mean, "sampler_logprob_diff_max": sampler_max,
    }


def _micro_step(host: LoraHost, batch: Batch, micro: list[TrainItem], config: GRPOConfig,
                weight_scale: float) -> Counter:
    model = host.model
    # Per-token tensors in the same flat order as token_logprobs returns them.
    seq_index = batch.token_rows
    old = batch.old_logprobs()
    advantages = torch.tensor([it.advantage for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    weights = torch.tensor([it.weight * weight_scale for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    new, entropy = token_logprobs(model, batch, config.temperature, with_entropy=True)
    ref = None
    if config.kl_coef:
        with torch.no_grad(), host.base_only():
            ref, _ = token_logprobs(model, batch, config.temperature)
    terms = grpo_token_loss(new, old, advantages, weights, seq_index, variant=config.loss, eps_low=config.eps_low,
                            eps_high=config.eps_high, importance_sampling=config.importance_sampling, ref_lp=ref,
                            kl_coef=config.kl_coef)
    terms.loss.backward()
    diff = (new.detach() - old).abs()
    return Counter({"loss": float(terms.loss.detach()), "clipped": float(terms.clipped), "approx_kl": float(terms.approx_kl_policy),
                    "kl_ref": float(terms.kl_ref), "entropy": float(entropy.sum()), "tokens": int(new.numel()),
                    "sampler_diff": float(diff.sum()), "sampler_diff_max": float(diff.max()) if diff.numel() else 0.0})
