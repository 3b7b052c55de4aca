"""art-server: the bundled GPU server of art-ts (serving, GRPO/SFT training, checkpoints)."""

from .core.openmp_waiting import wait_briefly_between_operators

wait_briefly_between_operators()  # before anything imports torch (core/openmp_waiting.py)

__version__ = "0.1.0"
