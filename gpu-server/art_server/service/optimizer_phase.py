"""Which optimizer state a step starts from.

SFT and RL optimise different objectives. After a warm start, Adam's moments point along SFT's last
gradients and are scaled by their magnitudes, so an RL step that inherits them moves mostly along
SFT's direction and barely along its own (tests/test_optimizer_phase.py measures the first RL
update's cosine with the RL gradient both ways). So a step whose kind (`sft`, `grpo`) differs from
the kind of the step that last updated the optimizer starts with fresh moments; `reset_optimizer`
true always does, false never does. The kind is recorded in each checkpoint (`optimizer_phase`), so a
resumed model knows it.
"""

from __future__ import annotations

from typing import Any

import torch


def starts_fresh(previous: str | None, kind: str, asked: bool | None) -> bool:
    """Whether a `kind` step resets the optimizer, after steps of kind `previous` (None: none yet)."""
    if asked is not None:
        return asked
    return previous is not None and previous != kind


def reset(optimizer: torch.optim.Optimizer) -> None:
    """Fresh moments and step counts for every parameter (the step's snapshot holds the old ones)."""
    optimizer.state.clear()


def recorded_phase(state: dict[str, Any]) -> str | None:
    """The kind of step a checkpoint's optimizer state comes from (older checkpoints: their row's kind)."""
    if state.get("optimizer_phase"):
        return state["optimizer_phase"]
    if state.get("kind") == "train":
        return (state.get("history_row") or {}).get("kind")
    return None
