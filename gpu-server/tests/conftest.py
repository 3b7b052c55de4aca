"""Fixtures: the real server process over HTTP, and small LoRA adapters trained for the tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from art_server.models.builtin import builtin_path
from art_server.models.resolve import DEFAULT_BASE_MODEL, resolve_base_model

from hardware_marks import pytest_collection_modifyitems, pytest_runtest_setup, pytest_terminal_summary  # noqa: F401 (pytest's hooks)

# Packaged models are converted once into this cache and shared by every test server (and by the
# notebooks and TypeScript tests, whose LocalBackend uses the same default).
MODEL_CACHE = Path(os.environ.get("ART_MODEL_CACHE") or Path(__file__).resolve().parents[2] / ".art" / "models")

FAST_TIER = os.environ.get("ART_TEST_TIER") == "fast"

# A model the fuzzers register with `report` must not reach W&B's servers or write into the user's
# Trackio store: every test server reports offline, into a store of this run's own.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="art-test-trackio-"))


def no_server_in_the_fast_tier() -> None:
    if FAST_TIER:
        pytest.fail(
            "a test of the fast tier (@pytest.mark.fast) started the server: take the mark off, or test without a server process",
            pytrace=False,
        )


@dataclass
class ServerProcess:
    url: str
    token: str
    process: subprocess.Popen
    data_dir: Path
    stderr_lines: list[str] = field(default_factory=list)

    def client(self, token: str | None = None, **kw) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token if token is None else token}"} if token != "" else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kw.pop("timeout", 60), **kw)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start_server(data_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> ServerProcess:
    """Starts `python -m art_server` and waits for its ready line."""
    no_server_in_the_fast_tier()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "art_server",
            "--data-dir",
            str(data_dir),
            "--port",
            "0",
            "--model-cache",
            str(MODEL_CACHE),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []

    def drain() -> None:
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=drain, daemon=True).start()
    ready: dict = {}

    def read_ready() -> None:
        for line in proc.stdout:
            if line.startswith("{"):
                ready.update(json.loads(line))
                return

    reader = threading.Thread(target=read_ready, daemon=True)
    reader.start()
    reader.join(timeout)
    if not ready:
        proc.kill()
        raise RuntimeError("server did not become ready:\n" + "".join(lines[-40:]))
    return ServerProcess(ready["url"], ready["token"], proc, data_dir, lines)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("art-data")


@pytest.fixture(scope="session")
def tiny_path(data_dir: Path) -> Path:
    return builtin_path("builtin:tiny", data_dir)


@pytest.fixture(scope="session")
def smol_path() -> Path:
    """The default base model (SmolLM2-135M-Instruct) as a Hugging Face folder."""
    return resolve_base_model(DEFAULT_BASE_MODEL, MODEL_CACHE, MODEL_CACHE).path


@pytest.fixture(scope="session")
def server(data_dir: Path, tiny_path: Path) -> Iterator[ServerProcess]:
    srv = start_server(data_dir, "--base-model", "builtin:tiny", "--max-body-bytes", "1000000", "--docs")
    yield srv
    srv.stop()


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def configuration_error(data_dir: Path, *args: str, timeout: float = 120) -> str:
    """Starts `python -m art_server` expecting a configuration error: exit code 78, no traceback;
    returns the one line it printed last."""
    no_server_in_the_fast_tier()
    result = subprocess.run(
        [sys.executable, "-m", "art_server", "--data-dir", str(data_dir), "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 78, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.stderr.strip().splitlines()[-1]
