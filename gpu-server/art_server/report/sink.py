"""A tracker a reporter sends rows to: Weights & Biases or Trackio, each behind the same small interface."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal, Protocol

from .run_spec import RunSpec

Tracker = Literal["wandb", "trackio"]
TRACKERS: tuple[Tracker, ...] = ("wandb", "trackio")
INSTALL_HINT = "pip install 'art-server[tracking]' on the server's machine (npm run setup does it)"


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
