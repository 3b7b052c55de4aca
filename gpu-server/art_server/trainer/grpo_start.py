"""What a GRPO step fixes before its first update, per micro-batch of its plan:

- **the proximal logprobs**: the trainer's own logprobs before the update (decoupled PPO's pi_prox;
  the behaviour policy is the sampler, whose logprobs came with the tokens), for the gradient steps
  after the first (the first computes them in its own pass: nothing has moved yet);
- **the kept sets of truncated tokens** (min_p, top_k, top_p): the tokens each one's sampler kept,
  so every gradient step scores the policy renormalised over that same set. A token sampled at the
  step trained from gets the set its policy keeps now (the first gradient step finds it in its own
  pass); one sampled by an earlier step (a pipelined loop) gets the set of that step's policy, from
  its checkpoint (`behind`: step -> the slot holding its adapter). Where that checkpoint is gone, the
  set of the policy at the step's start stands in, and the step says so.

No pass runs for a micro-batch that needs neither (the common case: one gradient step, untruncated
sampling). With LoRA dropout the first gradient step's own pass is noisy, so its sets come from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..core.distribution import KeptSets
from .grpo_config import GRPOConfig
from .grpo_prepare import TrainItem
from .logprobs import Batch, pad_batch, record_kept_sets, token_logprobs
from .lora import LoraHost
from .sequences import UNKNOWN_STEP

Key = tuple[int, int]  # (gradient step, micro-batch)


@dataclass
class StartOfStep:
    proximal: dict[Key, torch.Tensor] = field(default_factory=dict)
    kept: dict[Key, KeptSets] = field(default_factory=dict)
    tokens_run: int = 0  # every token these passes ran (for the step's tokens per second)
    stand_ins: int = 0  # truncated tokens whose sampling step's checkpoint was gone


def passes_tokens(batch: Batch) -> int:
    """Tokens a pass over `batch` runs: each distinct prompt once, and every row's suffix."""
    return int(batch.prompt_mask.sum()) + int(batch.attention_mask.sum())


def start_of_step(
    host: LoraHost,
    slot: str,
    plan: list[list[list[TrainItem]]],
    config: GRPOConfig,
    pad_id: int,
    check: Callable[[], None],
    from_step: int,
    behind: dict[int, str],
    unscored: bool = False,
    lockstep: bool = False,
    truncated: bool = False,
) -> StartOfStep:
    """Runs before the step's first update (see the module's comment). `unscored`: tokens of plain
    messages, which take the proximal logprobs as their sampler's. `lockstep`: a sharded base, where
    every rank must run the same passes, so which ones run is decided from the whole step
    (`truncated`: some trained token of the step truncates; every step of `behind`), not from this
    rank's micro-batches."""
    out = StartOfStep()
    proximal_needed = config.sampler_correction == "tis" or unscored
    # With LoRA dropout the first gradient step's own pass is noisy: its proximal logprobs and kept
    # sets come from a clean pass here, as the later steps' do.
    noisy = host.dropout_rate(slot) > 0
    for k, micros in enumerate(plan):
        for i, micro in enumerate(micros):
            check()
            with host.lock, torch.no_grad():
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                truncates = batch.truncates
                kept = None
                stale = truncates & (batch.sampled_by != from_step) & (batch.sampled_by != UNKNOWN_STEP)
                present = set(batch.sampled_by[stale].tolist())
                out.stand_ins += int(sum(int((stale & (batch.sampled_by == s)).sum()) for s in present - set(behind)))
                for step in sorted(behind) if lockstep else sorted(present & set(behind)):
                    with host.using(behind[step]):
                        kept = record_kept_sets(host.model, batch, stale & (batch.sampled_by == step), kept)
                    out.tokens_run += passes_tokens(batch)
                wants_proximal = proximal_needed and (k > 0 or noisy)
                # The first gradient step's own pass finds the rest of its sets (nothing has moved yet).
                wants_kept = (truncated if lockstep else bool(truncates.any())) and (k > 0 or noisy)
                if wants_proximal or wants_kept:
                    logprobs, _, kept = token_logprobs(host.model, batch, kept=kept, fill=True)
                    out.tokens_run += passes_tokens(batch)
                    if wants_proximal:
                        out.proximal[(k, i)] = logprobs
                if kept is not None:
                    out.kept[(k, i)] = kept
    return out


def stand_in_notice(steps: list[int]) -> str:
    return (
        f"truncated turns (top_p, top_k or min_p) were sampled by step {', '.join(map(str, steps))}, whose checkpoint is "
        "gone, so their kept sets are the policy's at the start of this step instead of their sampler's: their ratios "
        "are approximate (the step's truncated_stand_ins counts the tokens). Keep the checkpoints a pipelined loop "
        "samples from until it has trained on them (deleteCheckpoints after training)"
    )
