"""What a tracker is sent of a history row, and of the trajectories it was computed from."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Row fields that place a row (its step and split) or are not metrics.
PLACEMENT = frozenset({"step", "split", "time", "kind", "trained_into_step"})
TABLE_COLUMNS = ["group", "reward", "conversation", "metrics"]


def row_metrics(row: dict[str, Any]) -> tuple[int, str, dict[str, float]]:
    """The row's step, its split, and its numbers as `<split>/<name>` (the server's snake_case names,
    as in history.jsonl); strings, lists and objects are left out."""
    split = str(row.get("split", "train"))
    metrics: dict[str, float] = {}
    for key, value in row.items():
        if key in PLACEMENT:
            continue
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, (int, float)) and math.isfinite(value):
            metrics[f"{split}/{key}"] = value
    return int(row.get("step", 0)), split, metrics


def trajectory_sample(path: Path, count: int) -> list[list[Any]]:
    """Up to `count` trajectories of a stored step (trajectories/<split>/<step>.jsonl) as table rows
    (`TABLE_COLUMNS`), one group after another's first trajectory so the sample spans the groups."""
    if count <= 0 or not path.exists():
        return []
    trajectories = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_group: dict[int, list[dict[str, Any]]] = {}
    for t in trajectories:
        by_group.setdefault(int(t.get("group", 0)), []).append(t)
    picked: list[dict[str, Any]] = []
    depth = 0
    while len(picked) < count and any(depth < len(g) for g in by_group.values()):
        picked += [g[depth] for g in by_group.values() if depth < len(g)][: count - len(picked)]
        depth += 1
    return [
        [int(t.get("group", 0)), float(t.get("reward", 0.0)), conversation_text(t), json.dumps(t.get("metrics") or {})]
        for t in picked
    ]


def conversation_text(trajectory: dict[str, Any]) -> str:
    """`role: content` lines, the sampled choices' messages included, tool calls as JSON."""
    lines = []
    for item in trajectory.get("messages_and_choices", []):
        message = item.get("message", {}) if item.get("kind") == "choice" else item
        content = message.get("content")
        if isinstance(content, list):  # content parts: their text
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = f"{message.get('role', '?')}: {content or ''}"
        if message.get("tool_calls"):
            text += " " + json.dumps(message["tool_calls"])
        lines.append(text)
    return "\n".join(lines)
