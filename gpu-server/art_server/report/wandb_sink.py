"""Weights & Biases through its official package: online with WANDB_API_KEY, or offline
(WANDB_MODE=offline: the run is kept on disk for `wandb sync`, nothing leaves the machine)."""

from __future__ import annotations

import os
from typing import Any, cast

from .rows import TABLE_COLUMNS
from .run_spec import RunSpec

STEP = "training_step"  # the x axis of every metric: the model's step, not W&B's own log counter


class WandbSink:
    def __init__(self, run: RunSpec):
        import wandb

        self._wandb = wandb
        self._run = wandb.init(
            project=run.project,
            name=run.name,
            id=run.run_id,
            resume="allow",
            config=run.config,
            dir=os.environ.get("WANDB_DIR") or str(run.root),
            reinit="create_new",  # one run per model, several models per server
            # The server's console is not the run's; init_timeout stays W&B's (WANDB_INIT_TIMEOUT).
            settings=wandb.Settings(console="off", silent=True),
        )
        self._run.define_metric(STEP)
        self._run.define_metric("*", step_metric=STEP)
        self.location = self._run.url or str(self._run.settings.sync_dir)

    def log(self, step: int, metrics: dict[str, float], table: tuple[str, list[list[Any]]] | None) -> None:
        data: dict[str, Any] = {**metrics, STEP: step}
        if table is not None:
            data[table[0]] = self._wandb.Table(columns=cast(Any, TABLE_COLUMNS), data=cast(Any, table[1]))
        self._run.log(data)

    def finish(self) -> None:
        self._run.finish()
