"""Which trackers each trainable model reports to (the register request's `report`, else the
server's --report), its reporters' lifecycle, and the notice a client gets when one fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .. import __version__
from ..core.config import ServerConfig
from ..report.reporter import Reporter
from ..report.sink import TRACKERS, Tracker, missing_package
from .trainable import TrainableModel

# What a stopping server waits for its trackers to take the last rows and finish their runs (all of a
# model's at once): W&B's finish beside a loaded CPU took more than the 10 s it had once, and the run
# lost its last row. A registration or fork that restarts them waits less: it holds up requests.
CLOSE_TIMEOUT_S = 60.0
RESTART_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ReportSettings:
    trackers: tuple[Tracker, ...] = ()
    trajectories: int = 0  # trajectories of each row's step sent as a table (0: none)


def check_trackers(trackers: Sequence[str]) -> tuple[Tracker, ...]:
    """The trackers, deduplicated in order; ValueError naming what is unknown or not installed."""
    chosen: list[Tracker] = []
    for name in trackers:
        if name not in TRACKERS:
            raise ValueError(f"unknown tracker {name!r}: report takes {', '.join(TRACKERS)}")
        missing = missing_package(name)  # type: ignore[arg-type]
        if missing:
            raise ValueError(missing)
        if name not in chosen:
            chosen.append(name)  # type: ignore[arg-type]
    return tuple(chosen)


def server_default(config: ServerConfig) -> ReportSettings:
    """What --report and --report-trajectories set for models that register without `report`."""
    names = [t.strip() for t in config.report.split(",") if t.strip()]
    return ReportSettings(check_trackers(names), config.report_trajectories)


class ReportingService:
    def __init__(self, default: ReportSettings):
        self.default = default
        self._settings: dict[str, ReportSettings] = {}

    async def configure(self, model: TrainableModel, settings: ReportSettings | None) -> None:
        """Starts the model's reporters (None: the server's default); a model registered again with
        other settings, or after a reporter failed, stops the old ones and starts anew."""
        settings = self.default if settings is None else settings
        running = model.reporters and all(r.state != "failed" for r in model.reporters)
        if self._settings.get(model.name) == settings and running:
            return
        await asyncio.to_thread(self._close, model, RESTART_TIMEOUT_S, "as the model was registered again")
        self._settings[model.name] = settings
        self._start(model, settings)

    def wake(self, model: TrainableModel) -> None:
        for reporter in model.reporters:
            reporter.wake()

    def notices(self, model: TrainableModel) -> list[str]:
        """One message for each reporter that has failed since the last call."""
        messages = []
        for reporter in model.reporters:
            if reporter.state == "failed" and not reporter.announced:
                reporter.announced = True
                messages.append(
                    f"reporting {model.name} to {reporter.tracker} stopped ({reporter.error}); training goes on and "
                    f"history.jsonl keeps every row. Fix the cause, then register the model again to resume reporting"
                )
        return messages

    async def suspend(self, model: TrainableModel) -> None:
        """Sends what is left and stops the model's reporters (its history is about to be replaced)."""
        await asyncio.to_thread(self._close, model, RESTART_TIMEOUT_S, "as the model was forked into")

    def restart(self, model: TrainableModel) -> None:
        """Starts the model's reporters again, as configured (after a fork: new runs)."""
        settings = self._settings.get(model.name)
        if settings is not None:
            self._start(model, settings)

    async def close_all(self, models: list[TrainableModel]) -> None:
        await asyncio.gather(*(asyncio.to_thread(self._close, m, CLOSE_TIMEOUT_S, "as the server stopped") for m in models))

    def _start(self, model: TrainableModel, settings: ReportSettings) -> None:
        config = {
            "model": model.name,
            "project": model.project,
            "base_model": model.base_model,
            "lora": model.lora.model_dump(),
            "art_server": __version__,
            **({"forked_from": model.forked_from} if model.forked_from else {}),
        }
        model.reporters = [
            Reporter(t, model.paths, model.project, model.name, config, settings.trajectories) for t in settings.trackers
        ]

    def _close(self, model: TrainableModel, timeout: float, why: str) -> None:
        reporters, model.reporters = model.reporters, []
        for reporter in reporters:
            reporter.ask_to_close()  # all at once, so they finish side by side within one deadline
        deadline = time.monotonic() + timeout
        for reporter in reporters:
            reporter.wait_closed(max(0.0, deadline - time.monotonic()), timeout, why)
