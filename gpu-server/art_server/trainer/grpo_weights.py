"""How a GRPO step's batch is dealt into gradient steps, and each token's weight in its gradient
step's loss (the loss is the weighted sum over tokens; trainer/loss.py)."""

from __future__ import annotations

import random
from dataclasses import replace

from .grpo_prepare import Prepared, TrainItem


def gradient_step_chunks(items: list[TrainItem], n: int, seed: int) -> list[list[TrainItem]]:
    """The items of each gradient step: whole groups (a group's advantages are relative to each
    other, so its trajectories update together), in an order shuffled by `seed` (the same on every
    rank and every retry), dealt into at most `n` steps of as near equal group counts as can be."""
    groups = sorted({it.group for it in items})
    random.Random(seed).shuffle(groups)
    n = max(1, min(n, len(groups)))
    share = {g: k * n // len(groups) for k, g in enumerate(groups)}
    return [[it for it in items if share[it.group] == k] for k in range(n)]


def constant_trajectories(prepared: Prepared, gradient_steps: int) -> float:
    """Dr. GRPO's batch size per gradient step: every trajectory sent, flat groups and zero
    advantages included, over the gradient steps asked for (at most one per group sent). It depends
    on the batch's shape only, never on its rewards."""
    return max(1, prepared.trajectories) / max(1, min(gradient_steps, prepared.groups))


def chunk_weights(
    chunk: list[TrainItem], mode: str, constant: int, prepared: Prepared, gradient_steps: int = 1
) -> list[TrainItem]:
    """Each token's weight in its gradient step's loss:

    - "trajectory" (GRPO): the mean over the gradient step's trajectories of each one's token mean,
      1 / (its trained tokens x trajectories in the step's groups); a long answer's tokens count less;
    - "token" (DAPO's token-level mean): the mean over every trained token of the step's groups,
      1 / (their trained tokens);
    - "constant" (Dr. GRPO as published): 1 / (B x `constant`), B the batch's trajectories per
      gradient step (constant_trajectories), the same for every token of every step whatever the
      answers' lengths and rewards (`constant` is normalization_tokens, Dr. GRPO's maximum
      completion length).

    The step's groups' counts include their zero-advantage trajectories (prepared.group_*), which
    need no pass of their own without a KL penalty: their terms are 0."""
    groups = {it.group for it in chunk}
    if mode == "trajectory":
        trajectories = sum(prepared.group_trajectories[g] for g in groups)
        return [replace(it, weight=1.0 / (it.trajectory_tokens * trajectories)) for it in chunk]
    if mode == "token":
        tokens = sum(prepared.group_tokens[g] for g in groups)
        return [replace(it, weight=1.0 / tokens) for it in chunk]
    if mode == "constant":
        weight = 1.0 / (constant_trajectories(prepared, gradient_steps) * constant)
        return [replace(it, weight=weight) for it in chunk]
    raise ValueError(f"unknown length_normalization {mode!r} (trajectory, token or constant)")
