"""A tracker a reporter sends rows to: Weights & Biases or Trackio, each behind the same small interface."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

Tracker = Literal["wandb", "trackio"]
TRACKERS: tuple[Tracker, ...] = ("wandb", "trackio")
INSTALL_HINT = "pip install 'art-server[tracking]' on the server's machine (npm run setup does it)"


@dataclass(frozen=True)
class RunSpec:
    """The tracker run of one trainable model."""

    project: str
    name: str  # the model's name: the run's display name
    run_id: str  # stable across restarts: the run resumes instead of starting over
    resume: bool  # the run was opened before (its reporter has state)
    config: dict[str, Any]
    root: Path  # the model's folder (W&B's files go under it unless WANDB_DIR says otherwise)


class Sink(Protocol):
    location: str  # where the run can be seen: a URL, or the folder of an offline run

    def log(self, step: int, metrics: dict[str, float], table: tuple[str, list[list[Any]]] | None) -> None: ...

    def finish(self) -> None: ...


def missing_package(tracker: Tracker) -> str | None:
    """Why `tracker` cannot report from this server (its package is not installed), or None."""
    if importlib.util.find_spec(tracker) is None:
        return f"reporting to {tracker} needs the {tracker} package: {INSTALL_HINT}"
    return None


def open_sink(tracker: Tracker, run: RunSpec) -> Sink:
    """Opens (or resumes) the run; blocking, and may take long or fail (a network, a key)."""
    if tracker == "wandb":
        from .wandb_sink import WandbSink

        return WandbSink(run)
    from .trackio_sink import TrackioSink

    return TrackioSink(run)
