"""Trackio: a local SQLite store (TRACKIO_DIR, default ~/.cache/huggingface/trackio) and a
dashboard (`trackio show`) with no account; TRACKIO_SERVER_URL sends the runs to a Trackio server
elsewhere (e.g. the laptop's, when this server runs on a GPU box)."""

from __future__ import annotations

from typing import Any

from .rows import TABLE_COLUMNS
from .run_spec import RunSpec


class TrackioSink:
    def __init__(self, run: RunSpec):
        import trackio

        self._trackio = trackio
        # resume by name: a model's run goes on after a restart; after a fork (new state) a new run
        # of the same name starts, as the history it reports starts over.
        self._run = trackio.init(
            project=run.project,
            name=run.name,
            config={**run.config, "run_id": run.run_id},
            resume="allow" if run.resume else "never",
            embed=False,
            auto_log_cpu=False,
            auto_log_gpu=False,
        )
        self.location = f"trackio project {run.project!r}, run {run.name!r} (`trackio show --project {run.project}`)"

    def log(self, step: int, metrics: dict[str, float], table: tuple[str, list[list[Any]]] | None) -> None:
        data: dict[str, Any] = dict(metrics)
        if table is not None:
            data[table[0]] = self._trackio.Table(columns=TABLE_COLUMNS, data=table[1])
        self._run.log(data, step=step)

    def finish(self) -> None:
        self._run.finish()
