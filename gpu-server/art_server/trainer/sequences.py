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

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sequence:
    """One forward pass: token ids, and for each position whether it is a trained token."""

    input_ids: list[int] = field(default_factory=list)
    trained: list[bool] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)  # aligned with input_ids (0 where untrained)

    def extend(self, ids: list[int], trained: bool, logprobs: list[float] | None = None) -> None:
        self.input_ids.extend(ids)
        self.trained.extend([trained] * len(ids))
        self.old_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def trained_tokens(self) -> int:
        return sum(self.trained)


@dataclass
class SampledTurn:
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float] | None


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
        turns.append(SampledTurn(list(prompt), list(ids), list(lps)))
    return turns


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
        current.extend(turn.token_ids, trained=True, logprobs=turn.logprobs)
    if current is not None:
        sequences.append(current)
    return sequences, splits
