"""`art-server`: starts the server, then prints one JSON line to stdout once it serves:

    {"event": "ready", "url": "http://127.0.0.1:PORT", "token": "...", ...}

so a client (the TypeScript LocalBackend) can start it and know where it is. Logs go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from . import __version__
from .core.allocator import keep_freed_memory
from .core.config import CONFIG_ERROR_PREFIX, CONFIG_EXIT_CODE, ServerConfig, parse_args
from .engine.base import EngineError
from .preflight import ConfigError, check_config
from .store.atomic import sweep_abandoned_builds


def configure_logging(level: str) -> dict:
    logging.basicConfig(stream=sys.stderr, level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:
        pass
    # uvicorn's access log goes to stdout by default; stdout carries only the ready line.
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "plain"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"stderr": handler},
        "loggers": {
            name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


class DataDirBusy(RuntimeError):
    pass


def lock_data_dir(data_dir: Path) -> int:
    """Takes an exclusive lock on the data dir for the life of the process: two servers writing one
    data dir could corrupt it. The lock dies with the process (kill -9 included)."""
    import fcntl

    fd = os.open(data_dir / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        info = {}
        with contextlib.suppress(Exception):
            info = json.loads((data_dir / "server.json").read_text())
        raise DataDirBusy(
            f"another art-server (pid {info.get('pid', '?')}, {info.get('url', 'url unknown')}) is using the "
            f"data dir {data_dir}; connect to that server, stop it, or pick another --data-dir"
        ) from None
    return fd


def write_server_file(data_dir: Path, ready: dict) -> None:
    """Where the running server is, for clients that want to reuse it (readable by the owner only)."""
    path = data_dir / "server.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(ready, f)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto says
    # TCP, and without it Nagle + delayed ACKs add ~40 ms to every keep-alive request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


async def serve(config: ServerConfig, log_config: dict) -> None:
    import uvicorn

    from .api.app import create_app, create_asgi
    from .api.connection import ConnectionLimits, bounded_protocol

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame) -> None:
            # Steps stop at the signal (each rolls back at its next micro-batch, or completes if it
            # is past its commit) rather than after uvicorn's wait for open connections.
            app.state.manager.training.cancel_all()
            super().handle_exit(sig, frame)

    from .trainer.ranks import RankSetupError, pin_rank_zero, rank_plan  # here: it imports torch

    plan = rank_plan(config)
    if plan is not None:
        pin_rank_zero(plan)  # before the engine starts threads (and vLLM, which is given its own cores)
    app = create_app(config)
    if config.base_model:
        # Loaded before listening, so an engine that cannot start (vLLM missing a requirement, a model
        # it cannot load, no memory for its KV cache) is one line and exit code 78, not a traceback.
        try:
            await app.state.manager.ensure_base(config.base_model)
        except EngineError as error:
            if error.code != "engine_unavailable":
                raise
            await app.state.manager.close()
            raise ConfigError(f"the {config.engine} engine could not start: {error}; fix that, or use --engine hf") from None
    if plan is not None:
        try:
            await app.state.manager.training.start_ranks(plan)
        except RankSetupError as error:
            await app.state.manager.close()
            raise ConfigError(str(error)) from None
    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    limits = ConnectionLimits(config.max_header_bytes, config.max_headers, config.header_timeout_s, config.body_timeout_s)
    uv = uvicorn.Config(
        create_asgi(app),
        http=bounded_protocol(limits),
        log_config=log_config,
        log_level=config.log_level,
        timeout_keep_alive=30,
        backlog=2048,
        timeout_graceful_shutdown=5,
    )
    server = Server(uv)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # startup failed: raise its error
            raise SystemExit("art-server stopped during startup")
        await asyncio.sleep(0.02)
    host = f"[{config.host}]" if ":" in config.host else config.host
    ready = {
        "event": "ready",
        "url": f"http://{host}:{port}",
        "token": config.token,
        "pid": os.getpid(),
        "version": __version__,
        "data_dir": str(config.data_dir),
        "base_model": config.base_model,
    }
    write_server_file(config.data_dir, ready)
    print(json.dumps(ready), flush=True)
    # stdout carries only the ready line: what libraries print later (trackio does) goes to the log.
    sys.stdout = sys.stderr
    watcher = asyncio.create_task(stop_when_gone(config.parent_pid, server)) if config.parent_pid else None
    try:
        await task
    finally:
        if watcher is not None:
            watcher.cancel()
        with contextlib.suppress(OSError):
            (config.data_dir / "server.json").unlink()


async def stop_when_gone(pid: int, server) -> None:
    """Asks uvicorn to stop (gracefully) once process `pid` has exited, e.g. a kernel killed with -9."""
    while True:
        await asyncio.sleep(1.0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            logging.getLogger(__name__).info("parent process %d is gone: stopping", pid)
            server.handle_exit(signal.SIGTERM, None)
            return
        except PermissionError:
            pass  # exists, owned by someone else


def main(argv: list[str] | None = None) -> None:
    keep_freed_memory()
    config = parse_args(argv)
    try:
        check_config(config)
    except ConfigError as error:
        print(f"{CONFIG_ERROR_PREFIX}{error}", file=sys.stderr, flush=True)
        sys.exit(CONFIG_EXIT_CODE)
    log_config = configure_logging(config.log_level)
    try:
        lock_data_dir(config.data_dir)
    except DataDirBusy as error:
        print(f"art-server: {error}", file=sys.stderr)
        sys.exit(3)
    # Under the lock nothing else builds in the data dir: what a killed start left half-built goes.
    removed = sweep_abandoned_builds(config.data_dir / "builtin", owned=True)
    if removed:
        logging.getLogger(__name__).warning("removed unfinished built-in model folders %s", removed)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        asyncio.run(serve(config, log_config))
    except KeyboardInterrupt:
        pass
    except ConfigError as error:
        print(f"{CONFIG_ERROR_PREFIX}{error}", file=sys.stderr, flush=True)
        sys.exit(CONFIG_EXIT_CODE)
    except OSError as error:
        print(f"art-server: cannot listen on {config.host}:{config.port}: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
