"""Rebuilding training sequences from trajectories, from the exact sampled token ids.

A trajectory is a conversation in which some assistant turns are sampled choices, each with the
prompt token ids the server rendered and the token ids it sampled (with their logprobs). Only those
sampled tokens are trained; everything else is context.

Multi-turn: turn k+1's prompt normally starts with turn k's prompt and sampled tokens (the chat
template is append-only); then both turns share one sequence. When it does not (a template that
rewrites history, or a re-tokenised assistant message that differs from what was sampled), the turn
starts a new sequence with its own prompt as context; `sequences_split` counts those.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.distribution import SamplingParams

PLAIN = SamplingParams()
UNKNOWN_STEP = -1  # Sequence.sampled_by of a token no step is known to have sampled


@dataclass
class Sequence:
    """One forward pass: token ids, and for each position whether it is a trained token."""

    input_ids: list[int] = field(default_factory=list)
    trained: list[bool] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)  # aligned with input_ids (0 where untrained)
    # aligned with input_ids: the distribution each token was sampled from (PLAIN where untrained)
    sampling: list[SamplingParams] = field(default_factory=list)
    # aligned with input_ids: the policy step that sampled each token (its turn's art_policy_step;
    # UNKNOWN_STEP where untrained or not recorded): a truncated turn is scored over the tokens that
    # step's policy kept (grpo_start.py)
    sampled_by: list[int] = field(default_factory=list)

    def extend(
        self,
        ids: list[int],
        trained: bool,
        logprobs: list[float] | None = None,
        sampling: SamplingParams = PLAIN,
        sampled_by: int | None = None,
    ) -> None:
        self.input_ids.extend(ids)
        self.trained.extend([trained] * len(ids))
        self.old_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.sampling.extend([sampling] * len(ids))
        self.sampled_by.extend([UNKNOWN_STEP if sampled_by is None else sampled_by] * len(ids))

    @property
    def trained_tokens(self) -> int:
        return sum(self.trained)


@dataclass
class SampledTurn:
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float] | None
    sampling: SamplingParams | None = None  # as the server recorded it (art_sampling); None: not recorded
    policy_step: int | None = None  # the step that sampled it (art_policy_step); None: not recorded


class MissingTokens(ValueError):
    pass


def sampled_turns(trajectory: dict[str, Any]) -> list[SampledTurn]:
    """The sampled choices of a trajectory, in order; MissingTokens when one lacks what training needs."""
    turns = []
    for k, item in enumerate(trajectory["messages_and_choices"]):
        if item.get("kind") != "choice":
            continue
        prompt, ids, lps = item.get("prompt_token_ids"), item.get("token_ids"), item.get("logprobs")
        if not prompt or ids is None:
            raise MissingTokens(f"item {k}: the choice has no prompt_token_ids/token_ids")
        if lps is None or len(lps) != len(ids):
            raise MissingTokens(f"item {k}: the choice has {0 if lps is None else len(lps)} logprobs for {len(ids)} tokens")
        recorded = item.get("art_sampling")
        sampling = SamplingParams.of_wire(recorded) if recorded else None
        turns.append(SampledTurn(list(prompt), list(ids), list(lps), sampling, item.get("art_policy_step")))
    return turns


@dataclass
class ScoringNotes:
    """Turns scored otherwise than recorded, for the step's notices."""

    unrecorded: int = 0  # turns that carry no art_sampling
    overridden: dict[float, int] = field(default_factory=dict)  # recorded temperature -> turns scored at the override


def scored_with(turns: list[SampledTurn], temperature: float | None, notes: ScoringNotes) -> list[SampledTurn]:
    """Each turn with the parameters it is scored at: as recorded, with the `temperature` override
    when one is given; a turn with none recorded is scored at the override or at 1, untruncated."""
    out = []
    for turn in turns:
        if turn.sampling is None:
            notes.unrecorded += 1
            sampling = SamplingParams(temperature if temperature is not None else 1.0)
        elif temperature is not None and not turn.sampling.greedy and temperature != turn.sampling.temperature:
            notes.overridden[turn.sampling.temperature] = notes.overridden.get(turn.sampling.temperature, 0) + 1
            sampling = replace(turn.sampling, temperature=temperature)
        else:
            sampling = turn.sampling
        out.append(replace(turn, sampling=sampling))
    return out


def scoring_notices(notes: ScoringNotes, temperature: float | None) -> list[str]:
    lines = []
    if notes.unrecorded:
        lines.append(
            f"{notes.unrecorded} sampled turn(s) carry no art_sampling (pushed by hand, or sampled by a server that does not "
            f"record it), so the trainer does not know their sampling parameters: scored at temperature "
            f"{temperature if temperature is not None else 1.0} without top-p/top-k. Sample them through this server's "
            "OpenAI endpoint (it records them), or give train the temperature they were sampled at"
        )
    if notes.overridden:
        seen = ", ".join(f"{n} at {t:g}" for t, n in sorted(notes.overridden.items()))
        lines.append(
            f"temperature {temperature:g} given to train overrides the temperature turns were sampled at ({seen}): their "
            "importance ratios start away from 1. Leave temperature out to score each turn as it was sampled"
        )
    return lines


def not_append_only_notice(base_model: str) -> str:
    """The step's warning when turns had to split (the same words every step: a client shows it once)."""
    return (
        f"the chat template of {base_model} is not append-only: a later turn's prompt does not extend the tokens an "
        "earlier turn of its conversation sampled (the template rewrites earlier turns, e.g. drops their reasoning as "
        "Qwen3's does). Each such turn trains as its own sequence, with its prompt as context; the step's "
        "sequences_split (sequencesSplit) counts them"
    )


def build_sequences(turns: list[SampledTurn]) -> tuple[list[Sequence], int]:
    """Sequences for one trajectory's sampled turns, and how many times it had to split."""
    sequences: list[Sequence] = []
    splits = 0
    current: Sequence | None = None
    for turn in turns:
        if current is not None and turn.prompt_token_ids[: len(current.input_ids)] == current.input_ids:
            current.extend(turn.prompt_token_ids[len(current.input_ids) :], trained=False)
        else:
            if current is not None:
                sequences.append(current)
                splits += 1
            current = Sequence()
            current.extend(turn.prompt_token_ids, trained=False)
        current.extend(
            turn.token_ids, trained=True, logprobs=turn.logprobs, sampling=turn.sampling or PLAIN, sampled_by=turn.policy_step
        )
    if current is not None:
        sequences.append(current)
    return sequences, splits


def is_unsampled(trajectory: dict[str, Any]) -> bool:
    """True for a trajectory of plain messages with assistant turns and no sampled choice (offline
    logs, another model's answers): no token ids, no logprobs."""
    items = trajectory["messages_and_choices"]
    return not any(i.get("kind") == "choice" for i in items) and any(i.get("role") == "assistant" for i in items)


def unsampled_sequences(
    trajectory: dict[str, Any], render: Callable[[dict[str, Any]], Sequence], temperature: float | None
) -> tuple[list[Sequence], int]:
    """The sequence of a trajectory of plain messages: its assistant turns rendered by the chat
    template and trained, their sampler logprobs left NaN, which the trainer fills with the policy's
    own at the start of the step (so each token's ratio starts at 1). Scored at `temperature` (or 1)."""
    try:
        seq = render(trajectory)
    except ValueError as error:
        raise MissingTokens(f"its plain messages cannot be tokenised for training: {error}") from None
    sampling = SamplingParams(temperature if temperature is not None else 1.0)
    seq.old_logprobs = [math.nan if t else 0.0 for t in seq.trained]
    seq.sampling = [sampling if t else PLAIN for t in seq.trained]
    seq.sampled_by = [UNKNOWN_STEP] * len(seq.trained)
    return [seq], 0
