"""Continuous batching for the transformers engine.

One background thread owns the model. Sequences from concurrent requests are grouped by adapter;
each group runs as one batch with a shared KV cache, advanced a token at a time, and the groups
take turns, so several adapters of one base are served side by side. New sequences join a running
batch at the next step: they are prefilled on their own, then their cache is merged into the
batch's (left-padded to one length, see merge_caches); finished and cancelled rows leave at once, and
the columns that were padding in every row that is left go with them (see _trim).

Sampled token ids, logprobs and top logprobs accumulate on the sequence. A streaming sequence also
reports each token through its `emit` callback; a non-streaming one only its finish, which saves a
hand-over to the event loop per token. `emit` is called on the scheduler thread (the caller hands
the event over to its event loop).

Over 400 lines: one thread's loop and the state only it touches (batches, their KV caches, the admission queue); split, that state would cross files.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .sampling import RowParams, sample

log = logging.getLogger(__name__)


@dataclass
class TokenEvent:
    index: int
    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]]


@dataclass
class FinishEvent:
    index: int
    reason: str  # "stop" | "length" | "cancelled"


@dataclass
class ErrorEvent:
    index: int
    message: str


SequenceEvent = TokenEvent | FinishEvent | ErrorEvent


@dataclass
class Sequence:
    """One choice of one request: a prompt to continue, its limits and where its events go."""

    request_id: str
    index: int
    adapter: str | None  # None: the base model
    prompt_ids: list[int]
    max_tokens: int
    params: RowParams
    emit: Callable[[SequenceEvent], None]
    stop: list[str] = field(default_factory=list)
    stream: bool = True
    # response_format: the token ids allowed after those generated so far (chat/structured.py)
    constraint: Callable[[list[int]], list[int]] | None = None
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    done: bool = False


class ModelRunner(Protocol):
    """What the scheduler needs from the model: a forward pass with an adapter chosen per call."""

    device: torch.device

    def forward(
        self,
        adapter: str | None,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: Any,
    ) -> tuple[torch.Tensor, Any]: ...

    def decode(self, token_ids: list[int]) -> str: ...


def _constrain(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """`logits` with the tokens a row's response_format does not allow next masked out."""
    rows = [(row, seq.constraint) for row, seq in enumerate(seqs) if seq.constraint is not None]
    if not rows:
        return logits
    mask = torch.zeros_like(logits)
    for row, constraint in rows:
        mask[row] = float("-inf")
        mask[row, torch.tensor(constraint(seqs[row].generated), dtype=torch.long, device=logits.device)] = 0
    return logits + mask


class _Batch:
    def __init__(self, adapter: str | None, seqs: list[Sequence]):
        self.adapter = adapter
        self.seqs = seqs
        self.cache: Any = None
        # Set by the batch's prefill, before any step reads them.
        self.mask: torch.Tensor
        self.positions: torch.Tensor
        self.last_tokens: torch.Tensor


class BatchScheduler:
    def __init__(
        self,
        runner: ModelRunner,
        eos_token_ids: set[int],
        max_batch_size: int = 256,
        pad_token_id: int = 0,
        seed: int = 0,
        threads: int | None = None,
    ):
        self.runner = runner
        # CPU threads for decode steps (set at each step: training in between may use more).
        self.threads = threads
        self.eos_token_ids = eos_token_ids
        self.max_batch_size = max_batch_size
        self.pad_token_id = pad_token_id
        self.generator = torch.Generator(device=runner.device).manual_seed(seed)
        self.model_lock = threading.RLock()  # held for every forward; take it to change the model
        self._pending: dict[str | None, deque[Sequence]] = defaultdict(deque)
        self._running: list[_Batch] = []
        self._waited: dict[str | None, int] = defaultdict(int)
        self.admit_every = 6
        self._cancelled: set[str] = set()
        # Other threads only put messages in the inbox and set the wake-up event; everything else
        # belongs to the scheduler thread, so the HTTP thread never waits on a lock it holds.
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._paused = 0
        self._stopped = False
        self.steps = 0
        self.tokens_generated = 0
        self.prompts_prefilled = 0  # distinct prompts run (rows that shared one are not counted again)
        self.tokens_prefilled = 0  # prompt tokens run through the model (a shared prefix counts once)
        self._thread = threading.Thread(target=self._loop, name="art-engine", daemon=True)
        self._thread.start()

    # -- called from other threads ------------------------------------------------------------
    def _post(self, kind: str, payload: Any = None) -> None:
        self._inbox.put((kind, payload))
        self._wake.set()

    def submit(self, seqs: list[Sequence]) -> None:
        if self._stopped:
            raise RuntimeError("the engine is shut down")
        self._post("submit", seqs)

    def cancel(self, request_id: str) -> None:
        self._post("cancel", request_id)

    def pause(self) -> None:
        """Stops stepping (running batches keep their state) until `resume`; used around training."""
        self._post("pause")

    def resume(self) -> None:
        self._post("resume")

    def load(self) -> dict[str, int]:
        """Approximate counts (read without synchronisation; for stats and tests)."""
        return {
            "pending": sum(len(q) for q in list(self._pending.values())) + self._inbox.qsize(),
            "running": sum(len(b.seqs) for b in list(self._running)),
        }

    def shutdown(self) -> None:
        self._post("stop")
        self._thread.join(timeout=10)

    # -- the scheduler thread -----------------------------------------------------------------
    def _drain_inbox(self) -> None:
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                for seq in payload:
                    self._pending[seq.adapter].append(seq)
            elif kind == "cancel":
                self._cancelled.add(payload)
            elif kind == "pause":
                self._paused += 1
            elif kind == "resume":
                self._paused = max(0, self._paused - 1)
            elif kind == "stop":
                self._stopped = True

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            self._wake.clear()
            self._drain_inbox()
            if self._stopped:
                break
            self._drop_cancelled_pending()
            if self._paused or not (self._running or any(self._pending.values())):
                self._wake.wait()
                continue
            admitted = self._admit()
            for batch in list(self._running):
                self._run(batch, prefill=False)
            for batch in admitted:
                self._run(batch, prefill=True)
                if batch.seqs:
                    self._join(batch)
            self._running = [b for b in self._running if b.seqs]
        self._fail_everything("the engine shut down")

    def _drop_cancelled_pending(self) -> None:
        if not self._cancelled:
            return
        for waiting in self._pending.values():
            for seq in [s for s in waiting if s.request_id in self._cancelled]:
                waiting.remove(seq)
                seq.emit(FinishEvent(seq.index, "cancelled"))
        live = {s.request_id for b in self._running for s in b.seqs} | {s.request_id for q in self._pending.values() for s in q}
        self._cancelled &= live

    def _admit(self) -> list[_Batch]:
        room = self.max_batch_size - sum(len(b.seqs) for b in self._running)
        admitted = []
        for adapter, waiting in self._pending.items():
            if not waiting or room <= 0:
                continue
            running = sum(len(b.seqs) for b in self._running if b.adapter == adapter)
            # Joining a running batch costs a prefill forward; gather a few arrivals per join
            # (at most `admit_every` steps of waiting) instead of prefilling each one alone.
            if running and len(waiting) < max(1, running // 4) and self._waited[adapter] < self.admit_every:
                self._waited[adapter] += 1
                continue
            self._waited[adapter] = 0
            take = [waiting.popleft() for _ in range(min(room, len(waiting)))]
            room -= len(take)
            admitted.append(_Batch(adapter, take))
        return admitted

    def _run(self, batch: _Batch, prefill: bool) -> None:
        try:
            with self.model_lock:
                if self.threads:
                    torch.set_num_threads(self.threads)
                logits = self._prefill(batch) if prefill else self._step(batch)
                logits = _constrain(logits, batch.seqs)
                rows = [s.params for s in batch.seqs]
                sampled = sample(logits, rows, self.generator)
        except Exception as error:  # a failing forward must not kill the engine thread
            log.exception("engine step failed")
            for seq in batch.seqs:
                seq.emit(ErrorEvent(seq.index, f"{type(error).__name__}: {error}"))
            batch.seqs = []
            return
        self.steps += 1
        self.tokens_generated += len(batch.seqs)
        batch.last_tokens = torch.tensor(sampled.token_ids, device=self.runner.device)[:, None]
        keep = []
        for row, seq in enumerate(batch.seqs):
            token = sampled.token_ids[row]
            seq.generated.append(token)
            seq.logprobs.append(sampled.logprobs[row])
            seq.top_logprobs.append(sampled.top_logprobs[row])
            if seq.stream:
                seq.emit(TokenEvent(seq.index, token, sampled.logprobs[row], sampled.top_logprobs[row]))
            reason = self._finish_reason(seq, token)
            if reason:
                seq.done = True
                seq.emit(FinishEvent(seq.index, reason))
            else:
                keep.append(row)
        if len(keep) < len(batch.seqs):
            self._select(batch, keep)

    def _finish_reason(self, seq: Sequence, token: int) -> str | None:
        if seq.request_id in self._cancelled:
            return "cancelled"
        if token in self.eos_token_ids:
            return "stop"
        if seq.stop and any(s in self.runner.decode(seq.generated) for s in seq.stop):
            return "stop"
        if len(seq.generated) >= seq.max_tokens:
            return "length"
        return None

    def _select(self, batch: _Batch, keep: list[int]) -> None:
        batch.seqs = [batch.seqs[i] for i in keep]
        if not keep:
            batch.cache = None
            return
        index = torch.tensor(keep, device=self.runner.device)
        batch.cache.batch_select_indices(index)
        batch.mask = batch.mask.index_select(0, index)
        batch.positions = batch.positions.index_select(0, index)
        batch.last_tokens = batch.last_tokens.index_select(0, index)
        self._trim(batch)

    def _trim(self, batch: _Batch) -> None:
        """Drops the leading columns that are padding in every remaining row. Without this a batch
        that never empties (continuous load) widens by a column per step, and every decode step
        attends over the whole width: at concurrency 64 it reached ~700 columns for ~30 real ones
        and halved throughput. Positions are explicit per row, so dropping columns changes nothing else."""
        live = batch.mask.any(dim=0).nonzero()
        start = int(live[0]) if len(live) else 0
        if start == 0:
            return
        batch.mask = batch.mask[:, start:]
        for layer in batch.cache.layers:
            layer.keys = layer.keys[..., start:, :]
            layer.values = layer.values[..., start:, :]

    def _join(self, new: _Batch) -> None:
        """Merges a freshly prefilled batch into the running batch of the same adapter, if any."""
        running = next((b for b in self._running if b.adapter == new.adapter and b.seqs), None)
        if running is None:
            self._running.append(new)
            return
        width = max(running.mask.shape[1], new.mask.shape[1])
        running.cache = merge_caches(running.cache, new.cache, width)
        running.mask = torch.cat([_left_pad(running.mask, width), _left_pad(new.mask, width)])
        running.positions = torch.cat([running.positions, new.positions])
        running.last_tokens = torch.cat([running.last_tokens, new.last_tokens])
        running.seqs = running.seqs + new.seqs

    def _prefill(self, batch: _Batch) -> torch.Tensor:
        """Runs each distinct prompt once (the n choices of a request, and the rollouts of a group that
        arrive together, share theirs), and the prefix all of them share (a system message) only once,
        then gives every row its prompt's cache."""
        device = self.runner.device
        distinct: dict[tuple[int, ...], int] = {}
        row_prompt = [distinct.setdefault(tuple(s.prompt_ids), len(distinct)) for s in batch.seqs]
        prompts = list(distinct)
        common = _common_prefix(prompts) if len(prompts) > 1 else 0
        if common < MIN_SHARED_PREFIX:
            common = 0
        cache = None
        if common:  # the shared prefix, once, then its cache for every prompt
            ids = torch.tensor([prompts[0][:common]], device=device)
            ones = torch.ones_like(ids)
            _, cache = self.runner.forward(batch.adapter, ids, ones, torch.arange(common, device=device)[None], None)
            for layer in cache.layers:
                layer.keys = layer.keys.expand(len(prompts), -1, -1, -1)
                layer.values = layer.values.expand(len(prompts), -1, -1, -1)
        width = max(len(p) for p in prompts) - common
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: every row's next token is at the end
            ids[row, width - len(prompt) + common :] = torch.tensor(prompt[common:])
            mask[row, width - len(prompt) + common :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = common + (mask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([torch.ones((len(prompts), common), dtype=torch.long, device=device), mask], dim=1)
        logits, cache = self.runner.forward(batch.adapter, ids, mask, positions, cache)
        logits = logits[:, -1, :]
        if len(prompts) < len(batch.seqs):
            index = torch.tensor(row_prompt, device=device)
            for layer in cache.layers:
                layer.keys = layer.keys.index_select(0, index)
                layer.values = layer.values.index_select(0, index)
            logits, mask, positions = logits.index_select(0, index), mask.index_select(0, index), positions.index_select(0, index)
        self.prompts_prefilled += len(prompts)
        self.tokens_prefilled += common + sum(len(p) - common for p in prompts)
        batch.cache = cache
        batch.mask = mask
        batch.positions = positions[:, -1:]
        return logits

    def _step(self, batch: _Batch) -> torch.Tensor:
        batch.mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=-1)
        batch.positions = batch.positions + 1
        logits, batch.cache = self.runner.forward(batch.adapter, batch.last_tokens, batch.mask, batch.positions, batch.cache)
        return logits[:, -1, :]

    def _fail_everything(self, message: str) -> None:
        for batch in self._running:
            for seq in batch.seqs:
                seq.emit(ErrorEvent(seq.index, message))
        for waiting in self._pending.values():
            for seq in waiting:
                seq.emit(ErrorEvent(seq.index, message))


MIN_SHARED_PREFIX = 8  # shorter common prefixes are not worth a forward of their own


def _common_prefix(prompts: list[tuple[int, ...]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own (its last
    position's logits pick the first sampled token)."""
    limit = min(len(p) for p in prompts) - 1
    n = 0
    first = prompts[0]
    while n < limit and all(p[n] == first[n] for p in prompts[1:]):
        n += 1
    return n


def _left_pad(t: torch.Tensor, width: int, dim: int = 1) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


def merge_caches(a: Any, b: Any, width: int) -> Any:
    """Concatenates two transformers DynamicCaches along the batch, left-padding each layer's keys
    and values to `width` positions (the padded positions are masked out by the attention mask)."""
    for layer_a, layer_b in zip(a.layers, b.layers):
        layer_a.keys = torch.cat([_left_pad(layer_a.keys, width, dim=-2), _left_pad(layer_b.keys, width, dim=-2)])
        layer_a.values = torch.cat([_left_pad(layer_a.values, width, dim=-2), _left_pad(layer_b.values, width, dim=-2)])
    return a
