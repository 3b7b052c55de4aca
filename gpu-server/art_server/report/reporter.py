"""A reporter: a thread that follows one model's history.jsonl and sends each row it has not sent
yet to one tracker. It keeps its cursor (and the run's id) in `<model>/reports/<tracker>.json`, so
a restarted server sends only what the tracker has not had. It never blocks the caller: opening a
run may wait on a network, and a reporter that fails stops alone."""

from __future__ import annotations

import json
import logging
import secrets
import threading
from typing import Any

from ..core.names import NameError_
from ..store.atomic import write_json
from ..store.history import read_history
from ..store.layout import ModelPaths
from .rows import row_metrics, trajectory_sample
from .run_spec import RunSpec
from .sink import Sink, Tracker, open_sink

log = logging.getLogger(__name__)


class Reporter:
    def __init__(self, tracker: Tracker, paths: ModelPaths, project: str, name: str, config: dict[str, Any], trajectories: int):
        self.tracker: Tracker = tracker
        self.state = "starting"  # then running; failed or closed at the end
        self.error: str | None = None
        self.location: str | None = None
        self.rows_sent = 0
        self.announced = False  # whether the client has had the notice of its failure
        self._paths, self._project, self._name, self._config = paths, project, name, config
        self._trajectories = trajectories
        self._wake = threading.Event()
        self._closing = False
        self._detached = False  # closed while still busy: it must write nothing more
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._follow, name=f"report-{tracker}-{name}", daemon=True)
        self._wake.set()  # rows already in the history (a resumed model) go first
        self._thread.start()

    def status(self) -> dict[str, Any]:
        return {
            "tracker": self.tracker,
            "state": self.state,
            "rows_sent": self.rows_sent,
            **({"location": self.location} if self.location else {}),
            **({"error": self.error} if self.error else {}),
        }

    def wake(self) -> None:
        """The history has grown: send the new rows."""
        self._wake.set()

    def ask_to_close(self) -> None:
        """Asks it to send what is left, finish the run and stop (wait_closed waits for that)."""
        self._closing = True
        self._wake.set()

    def wait_closed(self, remaining: float, timeout: float, why: str) -> None:
        """Waits at most `remaining` seconds of the `timeout` it was given; a reporter still busy then,
        e.g. opening its run on a slow network, is left to end alone, with a warning."""
        self._thread.join(remaining)
        if self._thread.is_alive():
            with self._lock:
                self._detached = True
            log.warning(
                "%s/%s: %s was still busy (%s) %.0f s after it was asked to stop %s; its run may lack the last rows "
                "(history.jsonl has every row)",
                self._project,
                self._name,
                self.tracker,
                self.state,
                timeout,
                why,
            )

    def _follow(self) -> None:
        sink: Sink | None = None
        try:
            state_file = self._paths.report_state(self.tracker)
            state = json.loads(state_file.read_text()) if state_file.exists() else {}
            run_id = str(state.get("run_id") or f"{self._name}-{secrets.token_hex(4)}")
            self.rows_sent = int(state.get("rows_sent", 0))
            spec = RunSpec(self._project, self._name, run_id, "run_id" in state, self._config, self._paths.root)
            sink = open_sink(self.tracker, spec)
            self.location = sink.location
            self.state = "running"
            self._save(run_id)
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._send(sink):
                    self._save(run_id)
                if self._closing:
                    break
            sink.finish()
            self.state = "closed"
        except Exception as error:  # a network, a key, a tracker's own error: this reporter stops, training goes on
            self.state = "failed"
            self.error = f"{type(error).__name__}: {error}"
            log.warning(
                "%s/%s: reporting to %s stopped (%s); history.jsonl still has every row",
                self._project,
                self._name,
                self.tracker,
                self.error,
            )
            if sink is not None:
                try:
                    sink.finish()
                except Exception:
                    pass

    def _send(self, sink: Sink) -> bool:
        """Sends the rows past the cursor; whether any were sent."""
        rows = read_history(self._paths)
        # A start after a crash may have dropped rows of an unfinished step: go on from the end.
        self.rows_sent = min(self.rows_sent, len(rows))
        sent = False
        for row in rows[self.rows_sent :]:
            step, split, metrics = row_metrics(row)
            sink.log(step, metrics, self._table(split, step))
            self.rows_sent += 1
            sent = True
        return sent

    def _table(self, split: str, step: int) -> tuple[str, list[list[Any]]] | None:
        try:
            sample = trajectory_sample(self._paths.trajectories(split, step), self._trajectories)
        except NameError_:  # a split no trajectory file can have
            return None
        return (f"{split}/trajectories", sample) if sample else None

    def _save(self, run_id: str) -> None:
        with self._lock:
            if not self._detached:
                self._paths.report_state(self.tracker).parent.mkdir(exist_ok=True)
                write_json(self._paths.report_state(self.tracker), {"run_id": run_id, "rows_sent": self.rows_sent})
