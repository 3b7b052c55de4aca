"""A training step as a transaction: the adapter's weights and its optimizer state are saved before
the step, and put back exactly (bit for bit, gradients cleared) when the step does not complete:
a non-finite loss, gradient norm or weight, a cancelled request (the client went away, the server
stops), an error, or a checkpoint that cannot be written."""

from __future__ import annotations

import copy
import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

from ..core.faults import fail_once
from .lora import LoraHost


class StepAborted(Exception):
    """The step stopped and was rolled back; `code` says why (the client's error carries it)."""

    code = "step_aborted"
    status = 422


class NonFiniteStep(StepAborted):
    code = "non_finite"


class StepCancelled(StepAborted):
    code = "step_cancelled"
    status = 409


@dataclass
class Snapshot:
    weights: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]


def take_snapshot(host: LoraHost, slot: str, optimizer: torch.optim.Optimizer) -> Snapshot:
    with host.lock:
        return Snapshot(host.weights(slot), copy.deepcopy(optimizer.state_dict()))


def restore(host: LoraHost, slot: str, optimizer: torch.optim.Optimizer, snapshot: Snapshot) -> None:
    with host.lock:
        host.load_weights(slot, snapshot.weights)
        optimizer.load_state_dict(copy.deepcopy(snapshot.optimizer_state))
        for parameter in host.parameters(slot):
            parameter.grad = None


class StepGuard:
    """What the training loops call: `check()` before each micro-batch (a cancelled step stops there),
    and `apply()` for each optimizer step, which refuses non-finite numbers before they reach the weights."""

    def __init__(self, cancel: threading.Event | None = None):
        self.cancel = cancel or threading.Event()
        self.optimizer_steps = 0

    def check(self) -> None:
        if self.cancel.is_set():
            raise StepCancelled(
                "the step was cancelled (the client disconnected, or the server is stopping); the model is as it was before it"
            )

    def apply(
        self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], max_grad_norm: float, loss: float, where: str
    ) -> float:
        """Clips, checks and takes one optimizer step; returns the gradient norm."""
        self.optimizer_steps += 1
        fail_once(f"gradient_step:{self.optimizer_steps}")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        if not math.isfinite(loss) or not math.isfinite(grad_norm):
            raise NonFiniteStep(
                f"{where}: the loss is {loss} and the gradient norm {grad_norm}; the step was rolled back. "
                "Check the rewards and sampled logprobs sent, or lower the learning rate"
            )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if not all(bool(torch.isfinite(p).all()) for p in params):
            raise NonFiniteStep(
                f"{where}: the update made adapter weights non-finite; the step was rolled back. Lower the learning rate"
            )
        return grad_norm
