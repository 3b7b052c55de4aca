"""The tracker run of one trainable model, as a reporter opens it and a sink (wandb_sink.py, trackio_sink.py) takes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunSpec:
    """The tracker run of one trainable model."""

    project: str
    name: str  # the model's name: the run's display name
    run_id: str  # stable across restarts: the run resumes instead of starting over
    resume: bool  # the run was opened before (its reporter has state)
    config: dict[str, Any]
    root: Path  # the model's folder (W&B's files go under it unless WANDB_DIR says otherwise)
