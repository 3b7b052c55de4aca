"""Durability (issue 21): a step is all-or-nothing even when its client leaves during the save or the
server is stopped during it, and a start that was killed leaves nothing behind. Nothing acknowledged
is lost and nothing half done appears, in memory, on disk, in what is served, and after a restart."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx

from conftest import ServerProcess, start_server
from probe import group_of, register, report, train_status, weights_of

LEAVE_MS = [10, 20, 40, 60, 80, 100, 130]  # after the step's progress line: during its save, its commit, its answer


def state_of(c: httpx.Client, server: ServerProcess, project: str, name: str) -> dict[str, Any]:
    """What a client and the disk can see of a model, once no step of it runs."""
    deadline = time.time() + 20
    while (info := c.get(f"/v1/art/models/{name}").json())["training"]:
        assert time.time() < deadline, "still training 20 s after the client left"
        time.sleep(0.05)
    root = server.data_dir / project / "models" / name
    bare = next(m for m in c.get("/v1/models").json()["data"] if m["id"] == name)
    return {
        "step": info["step"],
        "checkpoints": sorted(int(p.name) for p in (root / "checkpoints").iterdir() if p.name.isdigit()),
        "trained_into": sorted(
            r["trained_into_step"] for r in c.get(f"/v1/art/models/{name}/history").json()["rows"] if "trained_into_step" in r
        ),
        "trajectories": sorted(int(p.stem) for p in (root / "trajectories" / "train").glob("*.jsonl"))
        if (root / "trajectories" / "train").exists()
        else [],
        "bare_name_serves": bare["parent"],
        "leftovers": sorted(p.name for p in (root / "checkpoints").iterdir() if not p.name.isdigit()),
    }


def consistent(state: dict[str, Any], name: str) -> bool:
    """Every committed step has its checkpoint, history row and trajectories, is what the bare name
    serves, and nothing of an uncommitted step is there."""
    s = state["step"]
    return (
        state["checkpoints"] == list(range(s + 1))
        and state["trained_into"] == list(range(1, s + 1))
        and state["trajectories"] == list(range(s))
        and state["bare_name_serves"] == f"{name}@{s}"
        and not state["leftovers"]
    )


def leave_after_progress(server: ServerProcess, name: str, body: bytes, delay_s: float) -> bytes:
    """Sends a train request on a raw socket, reads until its progress line, waits `delay_s`, closes."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1/art/models/{name}/train HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        seen = b""
        while b'"progress"' not in seen:
            chunk = sock.recv(65536)
            assert chunk, seen[-500:]
            seen += chunk
        time.sleep(delay_s)
    return seen


def same_weights(a: dict, b: dict, tolerance: float = 1e-6) -> bool:
    return a.keys() == b.keys() and all(float((a[k] - b[k]).abs().max()) <= tolerance for k in a)


def test_a_client_that_leaves_during_the_save_gets_a_step_that_happened_completely_or_not_at_all(tmp_path_factory):
    data = tmp_path_factory.mktemp("leave-save")
    server = start_server(data, "--base-model", "builtin:tiny")
    states, outcomes, memory_ok = [], [], True
    try:
        with server.client() as c:
            # A large LoRA makes the save take tens of milliseconds (r=512: ~55 ms on 2 cores).
            assert register(c, "big", "durable", lora={"r": 512, "alpha": 512}).status_code == 200
            group = group_of(c, "big", [1, 0, 0.5, 0.2])
            body = json.dumps({"groups": [group], "config": {"learning_rate": 1e-3}}).encode()
            for delay_ms in LEAVE_MS:
                before = c.get("/v1/art/models/big").json()["step"]
                leave_after_progress(server, "big", body, delay_ms / 1000)
                state = state_of(c, server, "durable", "big")
                states.append(state)
                outcomes.append("committed" if state["step"] == before + 1 else "rolled back" if state["step"] == before else "?")
                # What the adapter holds in memory is the latest checkpoint: a step at a negligible learning
                # rate saves it again (a rolled-back step that left its update behind would show here).
                status, _ = train_status(c, "big", [group], {"learning_rate": 1e-12})
                latest = c.get("/v1/art/models/big").json()["step"]
                memory_ok &= status == 200 and same_weights(
                    weights_of(server, "durable", "big", latest), weights_of(server, "durable", "big", latest - 1)
                )
            final = state_of(c, server, "durable", "big")
    finally:
        server.stop()
    again = start_server(data, "--base-model", "builtin:tiny")
    try:
        with again.client() as c:
            assert register(c, "big", "durable", lora={"r": 512, "alpha": 512}).status_code == 200
            restarted = state_of(c, again, "durable", "big")
    finally:
        again.stop()
    print("client left during the save:", dict(zip(LEAVE_MS, outcomes)))
    ok = all(consistent(s, "big") for s in states) and restarted == final and memory_ok
    report(
        "a client that leaves 10-130 ms after a step's progress line, r=512 (7 trials, restart)",
        [200] * len(LEAVE_MS),
        corrupted=not ok,
    )
    assert all(consistent(s, "big") for s in states), states
    assert "?" not in outcomes, outcomes
    assert memory_ok, "a rolled-back step left its update in the adapter"
    assert restarted == final, (final, restarted)


def test_sigterm_during_a_long_step_exits_within_a_second_and_rolls_it_back(tmp_path_factory):
    data = tmp_path_factory.mktemp("sigterm")
    s = start_server(data, "--base-model", "builtin:tiny")
    conversation = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}
    with s.client() as c:
        assert register(c, "long", "durable").status_code == 200
        body = {"conversations": [conversation] * 8, "config": {"epochs": 1000, "batch_size": 1}}
        with c.stream("POST", "/v1/art/models/long/train_sft", json=body) as r:
            lines = r.iter_lines()  # kept: the connection stays open, as a client still reading it keeps it
            for line in lines:
                if '"progress"' in line:
                    break
            started = time.perf_counter()
            s.process.send_signal(signal.SIGTERM)
            rest = []
            try:
                rest = [json.loads(line) for line in lines if line.strip()]
            except httpx.HTTPError:
                pass
            try:
                s.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                s.process.kill()
    seconds = time.perf_counter() - started
    told = [line["error"]["code"] for line in rest if line.get("type") == "error"]
    again = start_server(data, "--base-model", "builtin:tiny")
    try:
        with again.client() as c:
            assert register(c, "long", "durable").status_code == 200
            state = state_of(c, again, "durable", "long")
    finally:
        again.stop()
    print(f"SIGTERM during a long step: the server exited after {seconds:.2f} s")
    report(
        "SIGTERM during a long step: exit time, rollback",
        [200],
        hang=seconds > 15,
        corrupted=state["step"] != 0 or not consistent(state, "long"),
        wrong=f"exited after {seconds:.1f} s" if seconds > 1.5 else "",
    )
    assert seconds < 1.5, f"the server took {seconds:.2f} s to exit"
    assert told == ["step_cancelled"], rest[-3:]  # the client still reading is told the step was rolled back
    assert state["step"] == 0 and consistent(state, "long"), state


def test_a_start_killed_while_it_builds_a_model_leaves_no_folder_behind(tmp_path_factory):
    data = tmp_path_factory.mktemp("killed-build")
    builtin = data / "builtin"
    # A real death during the build (ART_FAULT ends the process as kill -9 would, before the rename) ...
    died = subprocess.Popen(
        [sys.executable, "-m", "art_server", "--data-dir", str(data), "--port", "0", "--base-model", "builtin:tiny"],
        env={**os.environ, "ART_FAULT": "exit_during_build"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        died.wait(timeout=120)
    except subprocess.TimeoutExpired:  # a server without that fault point started: stop it the same way
        died.kill()
        died.wait()
    left = sorted(p.name for p in builtin.iterdir() if p.name.startswith(".")) if builtin.exists() else []
    # ... and what an older server's death left (its temporary folders did not name their process).
    (builtin / ".tiny-v1-k2j4x9qz").mkdir(parents=True)
    (builtin / ".tiny-v1-k2j4x9qz" / "config.json").write_text("{}")
    server = start_server(data, "--base-model", "builtin:tiny")
    try:
        with server.client() as c:
            served = c.post(
                "/v1/chat/completions",
                json={"model": "builtin:tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            ).status_code
    finally:
        server.stop()
    remaining = sorted(p.name for p in builtin.iterdir() if p.name.startswith("."))
    report(
        "kill -9 during the first start (a built-in model half built)", [served], wrong=f"left {remaining}" if remaining else ""
    )
    assert died.returncode == 137 and left, (died.returncode, left)
    assert served == 200 and remaining == [], remaining


def test_abandoned_build_folders_of_dead_processes_are_swept_and_live_ones_kept(tmp_path):
    from art_server.store.atomic import sweep_abandoned_builds

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f".gguf-abc.build-{gone.pid}-x1y2"
    live = tmp_path / f".gguf-abc.build-{os.getppid()}-z3w4"  # a process that runs (the test runner's parent)
    other = tmp_path / ".not-a-build"
    for folder in (dead, live, other):
        folder.mkdir()
    assert sweep_abandoned_builds(tmp_path) == [dead.name]
    assert live.exists() and other.exists()
    assert sorted(sweep_abandoned_builds(tmp_path, owned=True)) == sorted([live.name, other.name])
