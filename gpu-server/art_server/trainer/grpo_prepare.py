"""A GRPO step's groups to what it trains: sequences with advantages, and the counts the loss's
divisors need. Groups that cannot train are counted by reason; the step's notices say what the
trainer assumed.

Which trajectories train. A group whose rewards are all equal has no advantage to learn from and is
left out whole, as DAPO's dynamic sampling leaves such groups out of the batch (also with a KL
penalty: its only gradient there would pull towards the reference). Within a group that trains,
every trajectory with sampled tokens counts in the divisors of `trajectory` and `token`, its
advantage 0 or not (GRPO's 1/G, DAPO's token mean); one whose advantage is 0 runs a pass only when a
KL penalty gives it a gradient. `constant` (Dr. GRPO) divides by the batch's trajectories whatever
their rewards (grpo_weights.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .grpo_config import GRPOConfig
from .loss import group_advantages
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


class ConstrainedChoices(ValueError):
    """Choices sampled under response_format, without allow_constrained_choices (a 400)."""


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
    trajectories_trained: int = 0  # with a non-zero advantage
    sequences_split: int = 0
    skip_details: list[str] = field(default_factory=list)
    # Per group that trains: its trajectories with sampled tokens, and their tokens (the divisors of
    # "trajectory" and "token", zero-advantage trajectories included).
    group_trajectories: dict[int, int] = field(default_factory=dict)
    group_tokens: dict[int, int] = field(default_factory=dict)
    # (policy lag, tokens) of each trained sampled turn that says its step (art_policy_step)
    lags: list[tuple[int, int]] = field(default_factory=list)
    scoring: ScoringNotes = field(default_factory=ScoringNotes)  # turns scored otherwise than recorded
    unsampled: int = 0  # trajectories of plain assistant messages that were trained (scored at the step's start)
    unsampled_skipped: int = 0  # ... that were not, the option being off
    constrained: int = 0  # trained turns sampled under response_format (allow_constrained_choices)
    notices: list[str] = field(default_factory=list)  # for the step's warning lines
    step: int = 0  # the step trained from
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

    def truncates(self) -> bool:
        """Whether some trained token was sampled with truncation (min_p, top_k, top_p)."""
        return any(p.truncates for it in self.items for p, t in zip(it.sequence.sampling, it.sequence.trained) if t)

    def truncated_steps_behind(self) -> set[int]:
        """The earlier steps that sampled truncated turns of this step: their kept sets are their
        policies' (grpo_start.py), so the service loads those checkpoints."""
        return {
            by
            for it in self.items
            for by, params, trained in zip(it.sequence.sampled_by, it.sequence.sampling, it.sequence.trained)
            if trained and params.truncates and 0 <= by < self.step
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


def _constrained_turns(seqs: list[Sequence]) -> int:
    """Trained tokens sampled under response_format, counted by turn start (one per run of them)."""
    runs = 0
    for s in seqs:
        inside = False
        for params, trained in zip(s.sampling, s.trained):
            runs += trained and params.constrained and not inside
            inside = trained and params.constrained
    return runs


def constrained_message(where: str) -> str:
    return (
        f"{where} has a choice sampled under response_format (art_sampling.constrained): the engine allowed only "
        "the tokens its JSON schema permits, so its logprobs are of that constrained distribution, and the trainer "
        "scores the unconstrained model: every ratio and sampler weight would be off where the constraint acted. "
        "Sample training rollouts without response_format (and check the JSON in the reward), or set "
        "allow_constrained_choices (allowConstrainedChoices) to train them against the unconstrained model anyway"
    )


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
    out = Prepared(groups=len(groups), step=step)
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
        advantages = group_advantages(rewards, config.scales_rewards)
        for t, ((seqs, splits), advantage, p) in enumerate(zip(built, advantages, plain)):
            tokens = sum(s.trained_tokens for s in seqs)
            if not tokens:  # nothing sampled (its agent never acted): its reward is in the baseline only
                continue
            out.group_trajectories[g] = out.group_trajectories.get(g, 0) + 1
            out.group_tokens[g] = out.group_tokens.get(g, 0) + tokens
            if abs(advantage) > 0 or config.kl_coef:  # advantage 0: only a KL penalty gives it a gradient
                constrained = _constrained_turns(seqs)
                if constrained and not config.allow_constrained_choices:
                    raise ConstrainedChoices(constrained_message(f"group {g}, trajectory {t}"))
                out.constrained += constrained
                kept.append((seqs, advantage, g))
                out.sequences_split += splits
                out.unsampled += p
                out.trajectories_trained += abs(advantage) > 0
        out.lags.extend(lags)
    for t, (seqs, advantage, g) in enumerate(kept):
        tokens = sum(s.trained_tokens for s in seqs)
        out.items.extend(TrainItem(s, advantage, 0.0, g, t, tokens) for s in seqs)
    out.seed = step
    out.notices = scoring_notices(out.scoring, config.temperature)
    if out.unsampled_skipped:
        out.notices.append(
            f"{out.unsampled_skipped} trajectories have assistant messages but no sampled choice (no token ids or logprobs), "
            "so they were context only and trained nothing. To train them (offline logs, another model's answers), set "
            "allow_training_without_logprobs (allowTrainingWithoutLogprobs): their tokens are then scored by the "
            "policy at the start of the step"
        )
    if out.constrained:
        out.notices.append(
            f"{out.constrained} turns sampled under response_format were trained against the unconstrained model "
            "(allow_constrained_choices): their sampler weights are below 1 where the constraint acted"
        )
    return out


def nothing_trained_reason(p: Prepared) -> str:
    if not p.groups:
        return "no groups were sent"
    parts = [f"{n} group{'s' if n > 1 else ''}: {SKIP_MESSAGES[r]}" for r, n in p.skipped.items()]
    return "nothing to train: " + ("; ".join(parts) if parts else "no trajectory had a non-zero advantage")


def check_token_ids(groups: list[list[dict[str, Any]]], vocab: int) -> None:
    """Every token id must index the model's vocabulary (an out-of-range id is an index error on
    the CPU and a device assert on CUDA, after part of the step ran): a ValueError naming it."""
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group):
            for c, item in enumerate(trajectory.get("messages_and_choices", [])):
                for field_name in ("prompt_token_ids", "token_ids"):
                    ids = item.get(field_name) or []
                    if ids and max(ids) >= vocab:
                        raise ValueError(
                            f"group {g}, trajectory {t}, item {c}: {field_name} holds {max(ids)}, outside the "
                            f"vocabulary of this base model ({vocab} tokens)"
                        )
