"""Experiment tracking (issue 41), against the real server process and the trackers' real packages:
Weights & Biases in its offline mode, read back with wandb's own reader (`wandb leet inspect
--json`), and Trackio's local store, read back with its own API and CLI. A reporter that fails (an
unreachable W&B server) never fails or stalls a step: one notice, the history stays complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import ServerProcess, configuration_error, start_server
from probe import group_of, register
from rl import step

PROJECT = "reliable"  # probe.register's project
BIN = Path(sys.executable).parent


def tracker_env(tmp: Path) -> dict[str, str]:
    return {"WANDB_MODE": "offline", "TRACKIO_DIR": str(tmp / "trackio"), "WANDB_SILENT": "true"}


def model_root(srv: ServerProcess, name: str) -> Path:
    return srv.data_dir / PROJECT / "models" / name


def history(srv: ServerProcess, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (model_root(srv, name) / "history.jsonl").read_text().splitlines()]


def report_state(srv: ServerProcess, name: str, tracker: str = "wandb") -> dict[str, Any] | None:
    path = model_root(srv, name) / "reports" / f"{tracker}.json"
    return json.loads(path.read_text()) if path.exists() else None


def info(c: httpx.Client, name: str) -> dict[str, Any]:
    r = c.get(f"/v1/art/models/{name}")
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(check, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def train_and_log(c: httpx.Client, name: str, steps: int, seed: int = 0) -> None:
    """`steps` GRPO steps, and a `val` row logged at each step reached."""
    for s in range(steps):
        rewards = [float((s + t) % 3) / 2 for t in range(4)]
        step(c, name, [group_of(c, name, rewards, seed=seed + s)], learning_rate=1e-2)
        r = c.post(f"/v1/art/models/{name}/log", json={"split": "val", "groups": [group_of(c, name, [0.25 * s, 0.5])]})
        assert r.status_code == 200, r.text


def wandb_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of an offline W&B run, read by wandb's own reader of its transaction log."""
    out = subprocess.run(
        [str(BIN / "wandb"), "leet", "inspect", "--json", str(run_dir)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def trackio(tmp: Path, *args: str) -> Any:
    out = subprocess.run(
        [str(BIN / "trackio"), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TRACKIO_DIR": str(tmp / "trackio")},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_each_row_reaches_wandb_offline_and_trackio_once_across_a_restart(tmp_path):
    srv = start_server(tmp_path / "data", "--base-model", "builtin:tiny", env=tracker_env(tmp_path))
    try:
        with srv.client() as c:
            r = register(c, "tracked", report=["wandb", "trackio"], report_trajectories=2)
            assert r.status_code == 200, r.text
            assert [t["tracker"] for t in r.json()["reporters"]] == ["wandb", "trackio"]
            train_and_log(c, "tracked", 3)
            rows = history(srv, "tracked")
            assert len(rows) == 6
            wait_for(lambda: all(t["rows_sent"] == 6 for t in info(c, "tracked")["reporters"]), "the reporters to send 6 rows")
            assert {t["state"] for t in info(c, "tracked")["reporters"]} == {"running"}
    finally:
        srv.stop()  # a graceful stop finishes the runs

    root = model_root(srv, "tracked")
    state = report_state(srv, "tracked")
    assert state["rows_sent"] == 6
    (first_run,) = (root / "wandb").glob("offline-run-*")
    records = wandb_records(first_run)
    run = next(r["run"] for r in records if r["type"] == "run")
    assert run["run_id"] == state["run_id"] and run["display_name"] == "tracked" and run["project"] == PROJECT
    config = run["config"]["update"]
    assert config["base_model"] == "builtin:tiny" and config["model"] == "tracked" and config["lora"]["r"] == 8
    logged = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert len(logged) == 6
    for row, item in zip(rows, logged):
        split = row["split"]
        assert item["training_step"] == row["step"]
        assert item[f"{split}/reward"] == pytest.approx(row["reward"])
        assert item[f"{split}/trajectories._type"] == "table-file"  # the sample of two trajectories
    assert any("train/loss" in item for item in logged) and any("train/step_s" in item for item in logged)
    assert [r["metric"] for r in records if r["type"] == "metric"][-1]["step_metric"] == "training_step"
    assert any(r["type"] == "exit" for r in records)

    # Trackio: the same rows, read back through its API and CLI.
    runs = trackio(tmp_path, "list", "runs", "--project", PROJECT)
    assert "tracked" in json.dumps(runs)
    rewards = trackio(tmp_path, "get", "metric", "--project", PROJECT, "--run", "tracked", "--metric", "train/reward")
    train_rows = [r for r in rows if r["split"] == "train"]
    assert [v["step"] for v in rewards["values"]] == [r["step"] for r in train_rows]
    assert [v["value"] for v in rewards["values"]] == pytest.approx([r["reward"] for r in train_rows])

    # A restart: the runs go on (the same W&B run id), and only the new rows are sent.
    srv = start_server(tmp_path / "data", "--base-model", "builtin:tiny", env=tracker_env(tmp_path))
    try:
        with srv.client() as c:
            assert register(c, "tracked", report=["wandb", "trackio"], report_trajectories=2).status_code == 200
            train_and_log(c, "tracked", 1, seed=10)
            wait_for(lambda: all(t["rows_sent"] == 8 for t in info(c, "tracked")["reporters"]), "8 rows sent")
    finally:
        srv.stop()
    (second_run,) = set((root / "wandb").glob("offline-run-*")) - {first_run}
    records = wandb_records(second_run)
    assert next(r["run"] for r in records if r["type"] == "run")["run_id"] == state["run_id"]
    assert [r["history"]["item"]["training_step"] for r in records if r["type"] == "history"] == [3, 4]
    rewards = trackio(tmp_path, "get", "metric", "--project", PROJECT, "--run", "tracked", "--metric", "train/reward")
    assert [v["step"] for v in rewards["values"]] == [0, 1, 2, 3]
    assert len(history(srv, "tracked")) == 8


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Any:
    tmp = tmp_path_factory.mktemp("reporting")
    s = start_server(tmp / "data", "--base-model", "builtin:tiny", env=tracker_env(tmp))
    yield s
    s.stop()


def test_a_fork_reports_to_a_new_run_that_starts_with_the_parents_history(srv):
    with srv.client() as c:
        assert register(c, "trunk", report=["wandb"]).status_code == 200
        train_and_log(c, "trunk", 2)
        assert register(c, "branch", report=["wandb"]).status_code == 200
        first = wait_for(lambda: report_state(srv, "branch"), "branch's run")
        r = c.post("/v1/art/models/branch/fork", json={"from_model": "trunk"})
        assert r.status_code == 200, r.text
        rows = len(history(srv, "branch"))
        assert rows == 4  # the parent's rows up to its step 2: two train rows, the val rows at steps 1 and 2
        wait_for(lambda: info(c, "branch")["reporters"][0]["rows_sent"] == rows, "the fork's rows sent")
        state = report_state(srv, "branch")
        assert state["run_id"] != first["run_id"] and state["rows_sent"] == rows


def test_report_asks_for_a_tracker_it_knows(srv):
    with srv.client() as c:
        r = register(c, "odd", report=["mlflow"])
        assert r.status_code == 400 and "report" in r.text and "wandb" in r.text
        r = register(c, "odd", report=["wandb"], report_trajectories=65)
        assert r.status_code == 400 and "report_trajectories" in r.text
        r = register(c, "plain", report=[])
        assert r.status_code == 200 and r.json()["reporters"] == []


def test_the_servers_report_flags_are_checked_at_start(tmp_path):
    line = configuration_error(tmp_path, "--report", "wandb,mlflow")
    assert "--report" in line and "'mlflow'" in line and "wandb, trackio" in line
    line = configuration_error(tmp_path, "--report", "trackio", "--report-trajectories", "65")
    assert "--report-trajectories" in line and "0 to 64" in line


def test_a_failing_reporter_never_fails_or_stalls_a_step(tmp_path):
    # Online W&B with a key, against a server that is not there: wandb.init retries, then gives up.
    env = {
        "WANDB_MODE": "online",
        "WANDB_API_KEY": "x" * 40,
        "WANDB_BASE_URL": "http://127.0.0.1:9",
        "WANDB_INIT_TIMEOUT": "10",
        "WANDB_SILENT": "true",
    }
    srv = start_server(tmp_path / "data", "--base-model", "builtin:tiny", "--report", "wandb", env=env)
    try:
        with srv.client() as c:
            assert register(c, "offline").status_code == 200  # the server's --report applies
            step(c, "offline", [group_of(c, "offline", [1.0, 0.0])], learning_rate=1e-2)
            # The step is done while the reporter is still trying to reach W&B: it did not wait.
            assert info(c, "offline")["reporters"][0]["state"] == "starting"
            failed = wait_for(
                lambda: (t := info(c, "offline")["reporters"][0])["state"] == "failed" and t, "the reporter to fail"
            )
            assert "127.0.0.1:9" in failed["error"]
            warnings = []
            for s in range(2):
                r = c.post(
                    "/v1/art/models/offline/train",
                    json={"groups": [group_of(c, "offline", [0.0, 1.0], seed=s)], "config": {"learning_rate": 1e-2}},
                )
                lines = [json.loads(line) for line in r.text.splitlines()]
                assert lines[-1]["type"] == "result", lines[-1]
                warnings.append([line["message"] for line in lines if line["type"] == "warning"])
            assert len(warnings[0]) == 1 and "reporting offline to wandb stopped" in warnings[0][0]
            assert "history.jsonl keeps every row" in warnings[0][0]
            assert warnings[1] == []  # one notice, not one per step
            assert [r.get("trained_into_step") for r in history(srv, "offline")] == [1, 2, 3]
    finally:
        srv.stop()
    assert sum("reporting to wandb stopped" in line for line in srv.stderr_lines) == 1
