"""art-server: the bundled GPU server of art-ts (serving, GRPO/SFT training, checkpoints)."""

__version__ = "0.1.0"
