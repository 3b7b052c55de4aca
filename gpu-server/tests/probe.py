"""The reliability probe: what the named regression tests (test_reliability.py, test_durability.py,
test_untrusted_clients.py, test_input_bounds.py) share. Every case appends a row to
`.artifacts/reliability.jsonl` (case, statuses seen, hang, corrupted) before it asserts, so a run
against an older server still fills its column: `scripts/reliability-table.py` prints the table."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from safetensors.torch import load_file

from conftest import ServerProcess
from rl import choice_item, sample

REPORT = Path(os.environ.get("ART_RELIABILITY_REPORT", Path(__file__).resolve().parents[2] / ".artifacts" / "reliability.jsonl"))
PROMPT = [{"role": "user", "content": "Name an empty cell."}]


TIMEOUT, RESET = -1, 0  # statuses of a request that got no answer in time, or whose connection the server dropped


def report(
    case: str, statuses: list[int], hang: bool = False, corrupted: bool = False, injected: bool = False, wrong: str = ""
) -> None:
    """One row of the probe table. A server fault injected by the test (ART_FAULT) is answered with
    a 5xx on purpose: those are not counted as 5xx for bad input. A dropped connection counts as a 5xx.
    `corrupted`: weights or a step lost or damaged; `wrong`: anything else not as required, said in words."""
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with REPORT.open("a") as out:
        out.write(
            json.dumps(
                {
                    "case": case,
                    "statuses": statuses,
                    "fivexx": 0 if injected else sum(s >= 500 or s == RESET for s in statuses),
                    "hang": hang or TIMEOUT in statuses,
                    "corrupted": corrupted,
                    "injected": injected,
                    "wrong": wrong,
                }
            )
            + "\n"
        )


def attempt(request: Any) -> Any:
    """`request()`, or TIMEOUT / RESET when it got no answer (so a case is reported before it is asserted)."""
    try:
        return request()
    except httpx.TimeoutException:
        return TIMEOUT
    except httpx.TransportError:
        return RESET


def status_of(response: Any) -> int:
    return response if isinstance(response, int) else response.status_code


def register(c: httpx.Client, name: str, project: str = "reliable", **extra: Any) -> httpx.Response:
    return c.post("/v1/art/models/register", json={"name": name, "project": project, "base_model": "builtin:tiny", **extra})


def group_of(c: httpx.Client, model: str, rewards: list[float], seed: int = 0) -> list[dict]:
    r = sample(c, model, PROMPT, len(rewards), 6, seed=seed)
    return [
        {"messages_and_choices": [*PROMPT, choice_item(r, ch)], "reward": reward} for ch, reward in zip(r["choices"], rewards)
    ]


def train_status(
    c: httpx.Client, name: str, groups: Any, config: dict | None = None, raw: bytes | None = None
) -> tuple[int, list[dict]]:
    """The HTTP status and NDJSON lines of a train request (an error line's status when the stream failed)."""
    body = raw if raw is not None else json.dumps({"groups": groups, "config": config or {}}).encode()
    with c.stream("POST", f"/v1/art/models/{name}/train", content=body, headers={"Content-Type": "application/json"}) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [r.json()]
        lines = [json.loads(x) for x in r.iter_lines() if x.strip()]
    return (lines[-1].get("status", 500) if lines[-1]["type"] == "error" else 200), lines


def weights_of(server: ServerProcess, project: str, name: str, step_: int) -> dict:
    return load_file(
        str(server.data_dir / project / "models" / name / "checkpoints" / f"{step_:04d}" / "adapter_model.safetensors")
    )


def finite(weights: dict) -> bool:
    return all(bool(v.isfinite().all()) for v in weights.values())


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


@contextlib.contextmanager
def health_latencies(url: str, interval: float = 0.05) -> Iterator[list[float]]:
    """Times GET /health every `interval` s while the block runs (does the server stall?)."""
    timings: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=30) as h:
            while not done.is_set():
                t = time.perf_counter()
                h.get("/health")
                timings.append(time.perf_counter() - t)
                time.sleep(interval)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield timings
    finally:
        done.set()
        poller.join()
