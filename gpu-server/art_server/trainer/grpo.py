"""One GRPO training step: trajectory groups in, an optimizer step (or a few) on one LoRA slot out.

The loop is plain: the groups become sequences with advantages (grpo_prepare.py), dealt into
gradient steps with each token's weight (grpo_weights.py); what must be fixed before the first
update is fixed (grpo_start.py: proximal logprobs, truncated tokens' kept sets); then for each
gradient step the loss is accumulated over micro-batches, the gradient clipped, the optimizer
stepped, and the numbers reported that say whether training is healthy (loss, grad norm, clip
fraction, KL, entropy), each a weighted mean over the step's tokens.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from ..core.distribution import KeptSets
from .grpo_config import GRPOConfig
from .grpo_prepare import Prepared, TrainItem
from .grpo_start import StartOfStep, passes_tokens, start_of_step
from .grpo_weights import chunk_weights, gradient_step_chunks
from .guard import StepGuard
from .logprobs import Batch, pad_batch, token_logprobs
from .lora import LoraHost
from .loss import grpo_token_loss, truncated_is_weights
from .micro_batches import prompt_ordered_micro_batches
from .parallel import DistributedSync, LocalSync, accumulate, padded

# Summed over a gradient step's tokens, then divided by the sum of their weights (`weight`): means.
WEIGHTED = ("loss", "clipped", "approx_kl", "kl_ref")


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
    behind: dict[int, str] | None = None,
) -> dict[str, Any]:
    """Runs the gradient steps; returns their metrics (the caller adds rewards and timings). `guard`
    stops a cancelled step between micro-batches and refuses non-finite updates (see guard.py); `sync`
    splits the work across trainer ranks (parallel.py; one process by default); `ref_slot` holds the
    adapter of `config.kl_ref_step`, the KL penalty's reference (None: the base model); `behind` the
    adapters of earlier steps that sampled truncated turns (grpo_start.py)."""
    guard = guard or StepGuard()
    sync = sync or LocalSync()
    params = host.parameters(slot)
    for group in optimizer.param_groups if optimizer is not None else []:
        group["lr"] = config.learning_rate
    started = time.perf_counter()
    chunks = [
        chunk_weights(chunk, config.length_normalization, config.normalization_tokens, prepared, config.gradient_steps)
        for chunk in gradient_step_chunks(prepared.items, config.gradient_steps, prepared.seed)
    ]

    # This rank's share of each gradient step, cut into passes (micro_batches.py). The sum is order-free.
    def length(item: TrainItem) -> int:
        return len(item.sequence.input_ids)

    def split(share: list[TrainItem]) -> list[list[TrainItem]]:
        return prompt_ordered_micro_batches(
            share, config.micro_batch_size, config.micro_batch_tokens, lambda it: it.sequence.input_ids
        )

    plan = [split(sync.shard(chunk, length)) for chunk in chunks]
    real = [len(micros) for micros in plan]  # the rest, if any, are passes that train nothing, for lockstep ranks
    if sync.lockstep:
        plan = [
            padded(micros, sync.most_micro_batches(chunk, length, split), TrainItem(chunk[0].sequence, 0.0, 0.0))
            for micros, chunk in zip(plan, chunks)
        ]
    # A cancelled step stops between micro-batches; with a sharded base, only where the ranks meet
    # (a rank leaving mid-pass would leave the others waiting for its shard of the weights).
    check = guard.check if not sync.lockstep else (lambda: None)
    start = start_of_step(
        host,
        slot,
        plan,
        config,
        pad_id,
        check,
        prepared.step,
        behind or {},
        prepared.unsampled > 0,
        sync.lockstep,
        sync.lockstep and prepared.truncates(),
    )
    totals = Counter()
    first = Counter()  # the first gradient step, before any update
    last = Counter()  # the last gradient step: how far the policy moved within the step
    for k, micros in enumerate(plan):
        # The start-of-step passes' counts ride with the first gradient step's, so ranks add them up.
        stats = Counter({"tokens_run": start.tokens_run, "stand_ins": start.stand_ins} if k == 0 else {})
        for i, micro in enumerate(micros):
            check()
            with host.lock:
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                micro_stats = _micro_step(host, slot, batch, micro, config, start, (k, i), ref_slot)
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
            first = stats
        last = stats
        means = {key: stats[key] / stats["weight"] if stats["weight"] else 0.0 for key in WEIGHTED}
        line = {
            "type": "progress",
            "gradient_step": k + 1,
            "gradient_steps": len(plan),
            "loss": means["loss"],
            "grad_norm": grad_norm,
            "clip_fraction": means["clipped"],
            "approx_kl": means["approx_kl"],
            "kl_ref": means["kl_ref"],
            "entropy": stats["entropy"] / max(1, stats["tokens"]),
            "lr": config.learning_rate,
            "tokens": int(stats["tokens"]),
        }
        accumulate(totals, {key: means[key] for key in WEIGHTED})
        accumulate(totals, {k2: stats[k2] for k2 in ("tokens", "entropy", "tokens_run", "stand_ins")})
        accumulate(totals, {"grad_norm": grad_norm})
        if progress:
            progress(line)
    n = len(plan)
    first_tokens = max(1, first["tokens"])
    last_tokens = max(1, last["tokens"])
    seconds = time.perf_counter() - started
    return {
        # Each a mean over the gradient steps of its weighted mean over their tokens.
        "loss": totals["loss"] / n,
        "grad_norm": totals["grad_norm"] / n,
        "clip_fraction": totals["clipped"] / n,
        "approx_kl": totals["approx_kl"] / n,
        "kl_ref": totals["kl_ref"] / n,
        "entropy": totals["entropy"] / max(1, totals["tokens"]),
        "tokens_trained": int(totals["tokens"]),
        "gradient_steps": n,
        "forward_backward_s": seconds,
        # Every token every pass ran (gradient passes, the start-of-step and reference passes; prompts
        # once per micro-batch, no padding), per second of the step's passes.
        "trainer_tokens_per_second": totals["tokens_run"] / seconds if seconds > 0 else 0.0,
        "trainer_tokens": int(totals["tokens_run"]),
        # How exactly the trainer sees what the sampler sampled, before the step's first update.
        "sampler_logprob_diff_mean": first["sampler_diff"] / first_tokens,
        "sampler_logprob_diff_max": first["sampler_diff_max"],
        # The ratio new / proximal at the last gradient step: how far the earlier gradient steps moved
        # the policy (exactly 1 with one gradient step: nothing has moved when it is taken).
        "importance_ratio_mean": last["ratio"] / last_tokens,
        "importance_ratio_max": last["ratio_max"],
        "sampler_weight_mean": first["sampler_weight"] / first_tokens,
        **({"truncated_stand_ins": int(totals["stand_ins"])} if totals["stand_ins"] else {}),
    }


def _micro_step(
    host: LoraHost,
    slot: str,
    batch: Batch,
    micro: list[TrainItem],
    config: GRPOConfig,
    start: StartOfStep,
    key: tuple[int, int],
    ref_slot: str | None,
) -> Counter:
    model = host.model
    dropout = host.dropout_rate(slot) > 0
    # Per-token tensors in the same flat order as token_logprobs returns them.
    seq_index = batch.token_rows
    sampler = batch.old_logprobs()
    advantages = torch.tensor([it.advantage for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    weights = torch.tensor([it.weight for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    proximal = start.proximal.get(key)
    kept = start.kept.get(key)
    # The first gradient step's pass (no update yet, no dropout) is its sampler's policy: it finds the
    # kept sets start_of_step left to it; every later pass scores over the sets found then.
    fill = key[0] == 0 and not dropout
    covered = kept is not None and bool((kept.covered | ~batch.truncates).all())
    ref = None
    tokens_run = passes_tokens(batch)
    # The KL reference scores over the policy's kept sets: before the policy's pass when they are
    # known (its memory is freed before the policy's graph is built), else right after it.
    reference_first = bool(config.kl_coef) and (covered or not bool(batch.truncates.any()))
    if reference_first:
        ref = _reference(host, slot, batch, kept, ref_slot)
        tokens_run += passes_tokens(batch)
    with host.dropout(slot) if dropout else contextlib.nullcontext():
        new, entropy, kept = token_logprobs(model, batch, with_entropy=True, kept=kept, fill=fill)
    assert entropy is not None  # with_entropy=True
    if config.kl_coef and not reference_first:
        ref = _reference(host, slot, batch, kept, ref_slot)
        tokens_run += passes_tokens(batch)
    # The policy before any update, as the sampler's stand-in and the ratio's denominator: this pass's
    # own at the first gradient step (a clean one from start_of_step with dropout), later the proximal.
    before = new.detach() if proximal is None else proximal
    unscored = torch.isnan(sampler)  # tokens of plain messages (allow_training_without_logprobs)
    if bool(unscored.any()):  # their sampler is the policy at the step's start: the ratio starts at 1
        sampler = torch.where(unscored, before, sampler)
    old, sampler_weights = sampler, None
    if config.sampler_correction == "tis":
        old = before
        sampler_weights = truncated_is_weights(old, sampler, config.sampler_correction_cap)
    terms = grpo_token_loss(
        new,
        old,
        advantages,
        weights,
        seq_index,
        variant=config.loss,
        eps_low=config.clip_range[0],
        eps_high=config.clip_range[1],
        importance_sampling=config.importance_sampling,
        ref_lp=ref,
        kl_coef=config.kl_coef,
        sampler_lp=sampler,
        sampler_weights=sampler_weights,
    )
    # The backward recomputes the head's chunks: in the mode of the forward (a LoRA head's dropout).
    with host.dropout(slot) if dropout else contextlib.nullcontext():
        terms.loss.backward()
    diff = (before - sampler).abs()
    any_tokens = diff.numel() > 0
    return Counter(
        {
            "loss": float(terms.loss.detach()),
            "clipped": float(terms.clipped),
            "approx_kl": float(terms.approx_kl_policy),
            "kl_ref": float(terms.kl_ref),
            "weight": float(weights.sum()),
            "entropy": float(entropy.sum()),
            "tokens": int(new.numel()),
            "tokens_run": tokens_run,
            "sampler_diff": float(diff.sum()),
            "sampler_diff_max": float(diff.max()) if any_tokens else 0.0,
            "ratio": float(terms.ratio.sum()),
            "ratio_max": float(terms.ratio.max()) if any_tokens else 0.0,
            "sampler_weight": float(sampler_weights.sum()) if sampler_weights is not None else float(new.numel()),
        }
    )


def _reference(host: LoraHost, slot: str, batch: Batch, kept: KeptSets | None, ref_slot: str | None) -> torch.Tensor:
    """The KL penalty's reference logprobs (kl_ref_step's adapter, or the base model) over `kept`."""
    with torch.no_grad(), host.using(ref_slot) if ref_slot else host.base_only():
        ref, _, _ = token_logprobs(host.model, batch, kept=kept, fill=False)
    host.activate(slot)
    return ref
