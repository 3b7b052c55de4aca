"""Metrics history and stored trajectories of a trainable model."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from .atomic import append_jsonl, link_or_copy, read_jsonl, write_jsonl
from .checkpoints import TRAJECTORIES
from .layout import ModelPaths


def group_metrics(groups: list[list[dict[str, Any]]]) -> dict[str, float]:
    """Mean reward, its spread, and the mean of every numeric metric the trajectories carry."""
    trajectories = [t for g in groups for t in g]
    rewards = [float(t["reward"]) for t in trajectories]
    row: dict[str, float] = {"trajectories": len(trajectories), "groups": len(groups)}
    if rewards:
        row["reward"] = statistics.fmean(rewards)
        row["reward_std"] = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    values: dict[str, list[float]] = {}
    for t in trajectories:
        for key, value in (t.get("metrics") or {}).items():
            if isinstance(value, bool):
                value = float(value)
            if isinstance(value, (int, float)) and math.isfinite(value):
                values.setdefault(key, []).append(float(value))
    for key, xs in values.items():
        row[key] = statistics.fmean(xs)
    return row


def append_history(paths: ModelPaths, step: int, split: str, metrics: dict[str, Any]) -> dict[str, Any]:
    row = {"step": step, "split": split, "time": time.time(), **metrics}
    append_jsonl(paths.history, [row])
    return row


def append_row(paths: ModelPaths, row: dict[str, Any]) -> None:
    append_jsonl(paths.history, [row])


def restore_history_rows(paths: ModelPaths, checkpoints: list[tuple[int, dict[str, Any]]]) -> list[int]:
    """After a crash between a checkpoint's rename and its history append: appends the row each
    checkpoint carries (state.json's history_row) when history.jsonl has none for its step."""
    have = {r.get("trained_into_step") for r in read_history(paths)}
    missing = [
        (step, state["history_row"])
        for step, state in checkpoints
        if isinstance(state.get("history_row"), dict) and step not in have
    ]
    if missing:
        append_jsonl(paths.history, [row for _, row in missing])
    return [step for step, _ in missing]


def read_history(paths: ModelPaths) -> list[dict[str, Any]]:
    return read_jsonl(paths.history)


def drop_history_after(paths: ModelPaths, latest_step: int) -> int:
    """After a crash: forget rows about steps past the last complete checkpoint (their step was lost)."""
    rows = read_history(paths)
    kept = [r for r in rows if r.get("trained_into_step", r.get("step", 0)) <= latest_step]
    lines = paths.history.read_text().splitlines() if paths.history.exists() else []
    if len(kept) != len(lines):  # rows dropped, or a line cut short by the crash
        write_jsonl(paths.history, kept)
    return len(rows) - len(kept)


def trajectory_rows(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"group": g, **t} for g, group in enumerate(groups) for t in group]


def write_trajectories(paths: ModelPaths, split: str, step: int, groups: list[list[dict[str, Any]]]) -> None:
    write_jsonl(paths.trajectories(split, step), trajectory_rows(groups))


def link_step_trajectories(paths: ModelPaths, step: int) -> bool:
    """Shows the trajectories checkpoint `step` trained on as trajectories/train/<step - 1>.jsonl (the
    step they were sampled at); False when the checkpoint holds none."""
    source = paths.checkpoint(step) / TRAJECTORIES
    if not source.exists():
        return False
    link_or_copy(source, paths.trajectories("train", step - 1))
    return True


def restore_step_trajectories(paths: ModelPaths, steps: list[int]) -> list[int]:
    """After a crash between a checkpoint's rename and the link of its trajectories: links them now."""
    return [s for s in steps if s > 0 and not paths.trajectories("train", s - 1).exists() and link_step_trajectories(paths, s)]
