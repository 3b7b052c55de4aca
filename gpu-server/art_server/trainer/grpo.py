"""One GRPO training step: trajectory groups in, an optimizer step (or a few) on one LoRA slot out.

The loop is plain: build sequences, compute advantages per group, then for each gradient step
accumulate the loss over micro-batches, clip the gradient, step the optimizer, and report the
numbers that say whether training is healthy (loss, grad norm, clip fraction, KL, entropy).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core.bounds import MAX_TOKENS_PER_SEQUENCE
from ..core.json_types import INTEGRAL, WholeNumber
from .guard import StepGuard
from .logprobs import Batch, pad_batch, token_logprobs
from .lora import LoraHost
from .loss import group_advantages, grpo_token_loss, truncated_is_weights
from .micro_batches import MICRO_BATCH_TOKENS, prompt_ordered_micro_batches
from .parallel import DistributedSync, LocalSync, accumulate, padded
from .sequences import (
    MissingTokens,
    ScoringNotes,
    Sequence,
    build_sequences,
    is_unsampled,
    sampled_turns,
    scored_with,
    scoring_notices,
    unsampled_sequences,
)


class GRPOConfig(BaseModel):
    """A GRPO step's configuration: declared once, here; the HTTP schema (TrainRequest.config) and
    the trainer both use it, and docs/openapi.json shows it."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={  # kl_ref_step needs kl_coef above 0 (the rule of _check_kl below)
            "if": {"required": ["kl_ref_step"], "properties": {"kl_ref_step": {"type": "integer"}}},
            "then": {"required": ["kl_coef"], "properties": {"kl_coef": {"exclusiveMinimum": 0}}},
        },
    )
    learning_rate: float = Field(default=5e-6, gt=0, le=1, allow_inf_nan=False)
    loss: Literal["ppo", "cispo"] = "ppo"
    # None: the defaults of the ratio in use (0.2 / 0.28 per token, GSPO's 3e-4 / 4e-4 per sequence).
    eps_low: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    eps_high: float | None = Field(default=None, ge=0, le=10, allow_inf_nan=False)
    kl_coef: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    scale_rewards: bool = True
    importance_sampling: Literal["token", "sequence"] = "token"
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False)
    micro_batch_size: WholeNumber = Field(default=16, ge=1, le=4096)
    # Padded tokens per forward/backward pass (micro_batches.py): bounds a pass's activation memory.
    micro_batch_tokens: WholeNumber = Field(default=MICRO_BATCH_TOKENS, ge=1, le=10**8)
    gradient_steps: WholeNumber = Field(default=1, ge=1, le=1000)
    # Overrides the temperature each turn is scored at (by default the one it was sampled with).
    temperature: float | None = Field(default=None, gt=0, le=10, allow_inf_nan=False)
    max_sequence_length: Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE), INTEGRAL] | None = None
    sampler_correction: Literal["tis", "none"] = "tis"
    sampler_correction_cap: float = Field(default=2.0, ge=1, le=1e6, allow_inf_nan=False)
    length_normalization: Literal["trajectory", "token", "constant"] = "trajectory"
    # The constant of length_normalization "constant" (Dr. GRPO's maximum completion length).
    normalization_tokens: WholeNumber = Field(default=1024, ge=1, le=MAX_TOKENS_PER_SEQUENCE)
    # The KL penalty's reference: this step's adapter (None: the base model).
    kl_ref_step: Annotated[int, Field(ge=0, le=10**9), INTEGRAL] | None = None
    # Groups with a turn sampled further behind are skipped ("stale").
    max_steps_off_policy: Annotated[int, Field(ge=0, le=10**6), INTEGRAL] | None = None
    # Trajectories whose assistant turns are plain messages (offline logs, another model's answers):
    # trained, their tokens scored by the policy at the start of the step (ART's option of this name).
    allow_training_without_logprobs: bool = False

    @field_validator("length_normalization", mode="before")
    @classmethod
    def _renamed_none(cls, value: object) -> object:
        if value == "none":  # the name of earlier versions, for what was a token mean over the step
            raise ValueError(
                '"none" was renamed: it was a token mean over the step, now "token"; for Dr. GRPO\'s '
                'constant normaliser say "constant" (with normalization_tokens)'
            )
        return value

    @model_validator(mode="after")
    def _check_kl(self) -> GRPOConfig:
        if self.kl_ref_step is not None and not self.kl_coef:
            raise ValueError(
                f"kl_ref_step {self.kl_ref_step} names the KL penalty's reference, but kl_coef is 0: set kl_coef "
                "above 0 (or leave kl_ref_step out)"
            )
        return self

    @property
    def clip_range(self) -> tuple[float, float]:
        """(eps_low, eps_high): as given, else the defaults of the ratio in use. A sequence ratio (the
        exp of a mean log ratio) moves far less than a token's, so GSPO clips it at 3e-4 / 4e-4."""
        low, high = (3e-4, 4e-4) if self.importance_sampling == "sequence" else (0.2, 0.28)
        return (self.eps_low if self.eps_low is not None else low, self.eps_high if self.eps_high is not None else high)


@dataclass
class TrainItem:
    sequence: Sequence
    advantage: float
    weight: float  # per trained token, set per gradient step (chunk_weights)
    group: int = 0  # which group of the step it belongs to (a gradient step holds whole groups)
    trajectory: int = 0  # which trajectory of the step
    trajectory_tokens: int = 0  # trained tokens of its whole trajectory (all its sequences)


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
    scoring: ScoringNotes = field(default_factory=ScoringNotes)  # turns scored otherwise than recorded
    unsampled: int = 0  # trajectories of plain assistant messages that were trained (scored at the step's start)
    unsampled_skipped: int = 0  # ... that were not, the option being off
    notices: list[str] = field(default_factory=list)  # for the step's warning lines
    seed: int = 0  # the order of groups across gradient steps (the step trained from)

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


def prepare(
    groups: list[list[dict[str, Any]]],
    config: GRPOConfig,
    context_length: int,
    step: int = 0,
    render: Callable[[dict[str, Any]], Sequence] | None = None,
) -> Prepared:
    """Sequences with advantages and weights; groups that cannot train are counted by reason. `step`
    is the step being trained from (its policy lag is measured from it); `render` tokenises a
    trajectory of plain assistant messages (with allow_training_without_logprobs)."""
    out = Prepared(groups=len(groups))
    limit = config.max_sequence_length or context_length
    kept: list[tuple[list[Sequence], float, int]] = []  # (sequences, advantage, group) per trajectory
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
        plain = [is_unsampled(t) for t in group]
        render_plain = render if config.allow_training_without_logprobs else None
        if render_plain is None:
            out.unsampled_skipped += sum(plain)
        try:
            built = [
                unsampled_sequences(t, render_plain, config.temperature)
                if p and render_plain is not None
                else build_sequences(scored_with(sampled_turns(t), config.temperature, out.scoring))
                for t, p in zip(group, plain)
            ]
        except MissingTokens as error:
            out.skipped["missing_tokens"] += 1
            out.skip_details.append(f"group {g}: {error}")
            continue
        if any(len(s.input_ids) > limit for seqs, _ in built for s in seqs):
            out.skipped["too_long"] += 1
            out.skip_details.append(f"group {g}: a sequence is over {limit} tokens")
            continue
        for (seqs, splits), advantage, p in zip(built, group_advantages(rewards, config.scale_rewards), plain):
            if abs(advantage) > 0 and sum(s.trained_tokens for s in seqs):
                kept.append((seqs, advantage, g))
                out.sequences_split += splits
                out.unsampled += p
        out.lags.extend(lags)
    for t, (seqs, advantage, g) in enumerate(kept):
        tokens = sum(s.trained_tokens for s in seqs)
        out.items.extend(TrainItem(s, advantage, 0.0, g, t, tokens) for s in seqs)
    out.trajectories_trained = len(kept)
    out.seed = step
    out.notices = scoring_notices(out.scoring, config.temperature)
    if out.unsampled_skipped:
        out.notices.append(
            f"{out.unsampled_skipped} trajectories have assistant messages but no sampled choice (no token ids or logprobs), "
            "so they were context only and trained nothing. To train them (offline logs, another model's answers), set "
            "allow_training_without_logprobs (allowTrainingWithoutLogprobs): their tokens are then scored by the "
            "policy at the start of the step"
        )
    return out


def nothing_trained_reason(p: Prepared) -> str:
    if not p.groups:
        return "no groups were sent"
    parts = [f"{n} group{'s' if n > 1 else ''}: {SKIP_MESSAGES[r]}" for r, n in p.skipped.items()]
    return "nothing to train: " + ("; ".join(parts) if parts else "no trajectory had a non-zero advantage")


def gradient_step_chunks(items: list[TrainItem], n: int, seed: int) -> list[list[TrainItem]]:
    """The items of each gradient step: whole groups (a group's advantages are relative to each
    other, so its trajectories update together), in an order shuffled by `seed` (the same on every
    rank and every retry), dealt into at most `n` steps of as near equal group counts as can be."""
    groups = sorted({it.group for it in items})
    random.Random(seed).shuffle(groups)
    n = max(1, min(n, len(groups)))
    share = {g: k * n // len(groups) for k, g in enumerate(groups)}
    return [[it for it in items if share[it.group] == k] for k in range(n)]


def chunk_weights(chunk: list[TrainItem], mode: str, constant: int) -> list[TrainItem]:
    """Each token's weight in its gradient step's loss (the loss is the weighted sum over tokens):

    - "trajectory" (GRPO): the mean over trajectories of each one's token mean,
      1 / (its trained tokens x trajectories in the gradient step); a long answer's tokens count less;
    - "token" (DAPO's token-level mean): the mean over every trained token of the gradient step,
      1 / (trained tokens in the gradient step);
    - "constant" (Dr. GRPO as published): 1 / (trajectories in the gradient step x `constant`), the
      same for every token of every step, whatever the answers' lengths (`constant` is the
      configuration's normalization_tokens, Dr. GRPO's maximum completion length)."""
    trajectories = len({it.trajectory for it in chunk})
    tokens = sum(it.sequence.trained_tokens for it in chunk)
    if mode == "trajectory":
        return [replace(it, weight=1.0 / (it.trajectory_tokens * trajectories)) for it in chunk]
    if mode == "token":
        return [replace(it, weight=1.0 / tokens) for it in chunk]
    if mode == "constant":
        return [replace(it, weight=1.0 / (trajectories * constant)) for it in chunk]
    raise ValueError(f"unknown length_normalization {mode!r} (trajectory, token or constant)")


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
    chunks = [
        chunk_weights(chunk, config.length_normalization, config.normalization_tokens)
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
    # The proximal policy's logprobs: the trainer's own before this step's first update (decoupled
    # PPO's pi_prox; the behaviour policy is the sampler, whose logprobs came with the tokens).
    proximal = _proximal_logprobs(host, slot, plan, config, pad_id, check, prepared.unsampled > 0)
    start_stats = Counter()  # the first gradient step, before any update
    last_stats = Counter()  # the last gradient step: how far the policy moved within the step
    for k, micros in enumerate(plan):
        stats = Counter()
        for i, micro in enumerate(micros):
            check()
            with host.lock:
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                micro_stats = _micro_step(host, slot, batch, micro, config, proximal.get((k, i)), ref_slot)
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
        last_stats = stats
        # The weights sum to 1 over a gradient step ("trajectory", "token"), so these sums are its
        # weighted means; with "constant" they are sums over the step, scaled by its constant.
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
        accumulate(totals, {"grad_norm": grad_norm, "entropy": stats["entropy"], "tokens_run": stats["tokens_run"]})
        if progress:
            progress(line)
    n = len(plan)
    start_tokens = max(1, start_stats["tokens"])
    last_tokens = max(1, last_stats["tokens"])
    seconds = time.perf_counter() - started
    return {
        "loss": totals["loss"] / n,
        "grad_norm": totals["grad_norm"] / n,
        "clip_fraction": totals["clip_fraction"] / n,
        "approx_kl": totals["approx_kl"] / n,
        "kl_ref": totals["kl_ref"] / n,
        "entropy": totals["entropy"] / max(1, totals["tokens"]),
        "tokens_trained": int(totals["tokens"]),
        "gradient_steps": n,
        "forward_backward_s": seconds,
        # Every token the passes ran (prompts and padding-free suffixes), per second of the step's passes.
        "trainer_tokens_per_second": totals["tokens_run"] / seconds if seconds > 0 else 0.0,
        # How exactly the trainer sees what the sampler sampled, before the step's first update.
        "sampler_logprob_diff_mean": start_stats["sampler_diff"] / start_tokens,
        "sampler_logprob_diff_max": start_stats["sampler_diff_max"],
        # The ratio new / proximal at the last gradient step: how far the earlier gradient steps moved
        # the policy (exactly 1 with one gradient step: nothing has moved when it is taken).
        "importance_ratio_mean": last_stats["ratio"] / last_tokens,
        "importance_ratio_max": last_stats["ratio_max"],
        "sampler_weight_mean": start_stats["sampler_weight"] / start_tokens,
    }


def _proximal_logprobs(
    host: LoraHost,
    slot: str,
    plan: list[list[list[TrainItem]]],
    config: GRPOConfig,
    pad_id: int,
    check: Callable[[], None],
    unscored: bool = False,
) -> dict[tuple[int, int], torch.Tensor]:
    """With the sampler correction on (or `unscored` tokens, which take them as their sampler's), the
    trainer's own logprobs of every micro-batch before the step's first update, for the gradient
    steps after the first (the first computes them in its own forward pass: nothing has changed
    yet). Keyed by (gradient step, micro-batch)."""
    out: dict[tuple[int, int], torch.Tensor] = {}
    if config.sampler_correction != "tis" and not unscored:
        return out
    for k, micros in enumerate(plan[1:], start=1):
        for i, micro in enumerate(micros):
            check()
            with host.lock, torch.no_grad():
                host.activate(slot)
                batch = pad_batch([it.sequence for it in micro], pad_id, host.device)
                out[(k, i)] = token_logprobs(host.model, batch)[0]
    return out


def _micro_step(
    host: LoraHost,
    slot: str,
    batch: Batch,
    micro: list[TrainItem],
    config: GRPOConfig,
    proximal: torch.Tensor | None,
    ref_slot: str | None,
) -> Counter:
    model = host.model
    ref = None
    if config.kl_coef:  # the reference first, then the policy's pass with `slot` active again
        with torch.no_grad(), host.using(ref_slot) if ref_slot else host.base_only():
            ref, _ = token_logprobs(model, batch)
        host.activate(slot)
    # Per-token tensors in the same flat order as token_logprobs returns them.
    seq_index = batch.token_rows
    sampler = batch.old_logprobs()
    advantages = torch.tensor([it.advantage for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    weights = torch.tensor([it.weight for it in micro], dtype=torch.float32, device=host.device)[seq_index]
    new, entropy = token_logprobs(model, batch, with_entropy=True)
    assert entropy is not None  # with_entropy=True
    unscored = torch.isnan(sampler)  # tokens of plain messages (allow_training_without_logprobs)
    if bool(unscored.any()):  # their sampler is the policy at the step's start: the ratio starts at 1
        sampler = torch.where(unscored, new.detach() if proximal is None else proximal, sampler)
    old, sampler_weights = sampler, None
    if config.sampler_correction == "tis":
        old = new.detach() if proximal is None else proximal
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
            "tokens_run": int(batch.prompt_mask.sum()) + int(batch.attention_mask.sum()),
            "sampler_diff": float(diff.sum()),
            "sampler_diff_max": float(diff.max()) if any_tokens else 0.0,
            "ratio": float(terms.ratio.sum()),
            "ratio_max": float(terms.ratio.max()) if any_tokens else 0.0,
            "sampler_weight": float(sampler_weights.sum()) if sampler_weights is not None else float(new.numel()),
        }
    )
