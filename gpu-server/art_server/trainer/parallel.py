"""Data parallelism inside one training step: what the GRPO and SFT loops call to split their work
across trainer ranks and to agree on each optimizer step.

Every rank runs the same loop over the same step (same sequences, same plan) and trains only its
shard of each gradient step, balanced by token count. At each optimizer step the ranks meet once
(`Sync.step`):

1. every rank's status and summed metrics go to rank 0 (a rank that failed says so here);
2. rank 0 says go or stop;
3. the LoRA gradients are summed onto rank 0 (one reduce of a flat buffer);
4. rank 0 clips, checks and steps its optimizer (guard.py), and broadcasts the new weights.

Only rank 0 holds an optimizer: the others receive its weights, so every rank holds bit-identical
weights after each update, and a rolled-back step needs rolling back on rank 0 only (the next step
sends its weights to everyone). The traffic per optimizer step is the LoRA parameters twice (the
reduce, the broadcast), the same as a ring all-reduce. The loss weights are global (each gradient
step is normalised over all its trajectories before sharding), so the summed gradient is the
single-process gradient up to float summation order.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch

from .guard import StepAborted, StepGuard

T = TypeVar("T")


class RankFailed(StepAborted):
    """A rank failed, died or stopped answering during a step; the step was rolled back."""

    code = "rank_failed"
    status = 503


class RankLost(RankFailed):
    """A collective failed: a peer closed its connection (it died) or did not answer in time. The
    process group cannot be used again."""


def short(error: BaseException) -> str:
    """An error's first sentence, without gloo's "[.../pair.cc:553] " prefix and advice."""
    first = (str(error).splitlines() or [""])[0]
    first = re.sub(r"\[[^\]]*\.(cc|cpp|h):\d+\] ", "", first).split(". This is typically")[0]
    return first or type(error).__name__


def shard_by_tokens(items: Sequence[T], ranks: int, rank: int, tokens: Callable[[T], int]) -> list[T]:
    """This rank's share of `items`: largest first onto the least-loaded rank, so every rank's token
    count is close. Deterministic, so every rank computes the same split without talking."""
    if ranks == 1:
        return list(items)
    order = sorted(range(len(items)), key=lambda i: (-tokens(items[i]), i))
    loads = [(0, r) for r in range(ranks)]
    mine: list[int] = []
    for i in order:
        load, r = heapq.heappop(loads)
        if r == rank:
            mine.append(i)
        heapq.heappush(loads, (load + tokens(items[i]), r))
    return [items[i] for i in sorted(mine)]


def accumulate(total: Counter, part: Mapping[str, float]) -> None:
    """Adds `part` into `total`: keys ending in `_max` keep the largest value, others sum. (Not
    Counter's +=, which drops negative sums: a loss can be below 0.)"""
    for key, value in part.items():
        total[key] = max(total.get(key, value), value) if key.endswith("_max") else total.get(key, 0) + value  # pyright: ignore[reportArgumentType]  (a Counter of floats)


def merge(parts: list[dict[str, float]]) -> Counter:
    total: Counter = Counter()
    for part in parts:
        accumulate(total, part)
    return total


def padded(micros: list[list[T]], most: int, filler: T) -> list[list[T]]:
    """`micros` made `most` long with one-item micro-batches of `filler`, which the loops run with
    zero weight: with a sharded base (sharding.py) every rank must run as many passes as the busiest."""
    return micros + [[filler]] * (most - len(micros))


class LocalSync:
    """One process: no sharding, and the optimizer step is the guard's."""

    rank, world = 0, 1
    lockstep = False

    def shard(self, items: Sequence[T], tokens: Callable[[T], int]) -> list[T]:
        return list(items)

    def most_micro_batches(
        self, items: Sequence[T], tokens: Callable[[T], int], split: Callable[[list[T]], list[list[T]]]
    ) -> int:
        return len(split(list(items)))

    def step(
        self,
        guard: StepGuard,
        optimizer: Any,
        params: list[torch.nn.Parameter],
        max_grad_norm: float,
        stats: Counter,
        where: str,
        lock: Any,
        final: bool,
    ) -> tuple[float, Counter]:
        with lock:
            return guard.apply(optimizer, params, max_grad_norm, stats["loss"], where), stats


def flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The gradients as one buffer (zeros for a parameter this rank did not reach: an empty shard)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params])


def unflatten_into(params: list[torch.nn.Parameter], flat: torch.Tensor, into_grad: bool) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            part = flat[offset : offset + p.numel()].view_as(p).to(p.dtype)
            if into_grad:
                p.grad = part.clone()
            else:
                p.copy_(part)
            offset += p.numel()


class DistributedSync:
    """The step's protocol over a torch.distributed process group (see the module docstring).
    `settled` is False while the other ranks may still be heading for the next meeting: a rank that
    fails between meetings calls `abandon()`, which attends it with a failure so nobody waits."""

    def __init__(self, rank: int, world: int, device: torch.device, lockstep: bool = False):
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.world, self.device = rank, world, device
        self.lockstep = lockstep  # the base model is sharded: every rank runs as many passes (sharding.py)
        self.settled = False

    def shard(self, items: Sequence[T], tokens: Callable[[T], int]) -> list[T]:
        return shard_by_tokens(items, self.world, self.rank, tokens)

    def most_micro_batches(
        self, items: Sequence[T], tokens: Callable[[T], int], split: Callable[[list[T]], list[list[T]]]
    ) -> int:
        """The most micro-batches any rank has for `items`, cut by `split` (each rank computes every rank's shard)."""
        return max(len(split(shard_by_tokens(items, self.world, r, tokens))) for r in range(self.world))

    def comm(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A collective; its failure (gloo or NCCL raise RuntimeError) becomes RankLost."""
        try:
            return fn(*args, **kwargs)
        except RuntimeError as error:
            self.settled = True
            raise RankLost(short(error)) from None

    def _meet(self, status: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Steps 1-2: statuses to rank 0, its decision back. Raises RankFailed when any rank failed."""
        gathered: list[Any] | None = [None] * self.world if self.rank == 0 else None
        self.comm(self.dist.gather_object, status, gathered, dst=0)
        decision: list[Any] = [None]
        if self.rank == 0:
            failed = [(r, s["error"]) for r, s in enumerate(gathered or []) if not s["ok"]]
            decision = [{"go": not failed, "failed": failed}]
        self.comm(self.dist.broadcast_object_list, decision, src=0)
        if not decision[0]["go"]:
            self.settled = True
            raise RankFailed("; ".join(f"rank {r}: {e}" for r, e in decision[0]["failed"]))
        return gathered

    def step(
        self,
        guard: StepGuard,
        optimizer: Any,
        params: list[torch.nn.Parameter],
        max_grad_norm: float,
        stats: Counter,
        where: str,
        lock: Any,
        final: bool,
    ) -> tuple[float, Counter]:
        """One optimizer step of all ranks; returns the gradient norm and the metrics summed over
        ranks (rank 0; the others get their own). `lock` guards the weights (shared with serving) only
        while they change, not while ranks wait for each other. `final`: no meeting follows."""
        gathered = self._meet({"ok": True, "stats": dict(stats)})
        flat = flat_grads(params).to(self.device)
        self.comm(self.dist.reduce, flat, dst=0)
        # [go, grad norm, weights...]: one broadcast ends the meeting either way.
        result = torch.zeros(2 + flat.numel(), dtype=torch.float32, device=self.device)
        merged = stats
        if self.rank == 0:
            merged = merge([g["stats"] for g in gathered or []])
            try:
                with lock:
                    unflatten_into(params, flat, into_grad=True)
                    grad_norm = guard.apply(optimizer, params, max_grad_norm, merged["loss"], where)
            except BaseException:
                self.comm(self.dist.broadcast, result, src=0)  # go = 0: the others stop too
                self.settled = True
                raise
            result[0], result[1] = 1.0, grad_norm
            result[2:] = torch.cat([p.detach().reshape(-1).float() for p in params])
        self.comm(self.dist.broadcast, result, src=0)
        self.settled = final or result[0] != 1.0
        if self.rank != 0:
            for p in params:
                p.grad = None
            if result[0] != 1.0:
                raise RankFailed(f"{where}: rank 0 refused the update (see its error)")
            with lock:
                unflatten_into(params, result[2:], into_grad=False)
        return float(result[1]), merged

    def abandon(self, error: BaseException) -> None:
        """This rank failed between meetings: attend the next one with the failure, so every rank
        learns it there and stops (a no-op when the protocol is already settled). Raises RankLost
        when the meeting itself fails, and with a sharded base, where a rank cannot leave a pass:
        there the step is lost for every rank (ranks.py)."""
        if self.settled:
            return
        if self.lockstep:  # the others may be inside a pass, waiting for weights, not at the meeting
            raise RankLost(f"{type(error).__name__}: {short(error)}")
        try:
            self._meet({"ok": False, "error": f"{type(error).__name__}: {error}"})
        except RankLost:
            raise
        except RankFailed:
            pass
