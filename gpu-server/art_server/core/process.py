"""What child processes (vLLM, trainer ranks) share: ending with this server, and the cores it had
before any pinning."""

from __future__ import annotations

import os
import signal
import sys

# Captured at import, before a trainer rank pins this process to its cores (ranks.pin_rank_zero).
ALL_CORES: frozenset[int] = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Asks Linux to send `sig` to this process when its parent dies, kill -9 included
    (PR_SET_PDEATHSIG; elsewhere a no-op). Call it in the child."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, sig)  # 1 = PR_SET_PDEATHSIG
