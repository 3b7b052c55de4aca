"""Fault injection for the reliability tests: `ART_FAULT=<point>` makes the server fail once at that
point of a training step, so a test can check what a real failure there leaves behind. Points:
`gradient_step:N` (an error after N-1 optimizer steps of the next step), `save` (the checkpoint
write fails like a read-only disk), `exit_after_publish` (the process dies right after a
checkpoint is renamed into place, like kill -9), `exit_during_build` (the process dies while a
model folder is being built, before its rename), `vllm_port_taken` (another process takes the port
picked for vLLM before vLLM binds it). Unset in normal use: then every call is a no-op."""

from __future__ import annotations

import errno
import os
import threading

_fault = os.environ.get("ART_FAULT", "")
_lock = threading.Lock()


def take_once(point: str) -> bool:
    """True the first time `point` is reached when ART_FAULT names it (the caller fails there)."""
    global _fault
    if not _fault or _fault != point:
        return False
    with _lock:
        if _fault != point:
            return False
        _fault = ""
    return True


def fail_once(point: str) -> None:
    """Raises (or exits) the first time `point` is reached when ART_FAULT names it."""
    if not take_once(point):
        return
    if point.startswith("exit_"):
        os._exit(137)
    if point == "save":
        raise OSError(errno.EROFS, "injected fault: read-only file system", "checkpoints")
    raise RuntimeError(f"injected fault at {point}")
